package flowtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// sagaStep is the engine's saga wrapper (runtime/step_saga.go) on an
// in-memory instance store: one delivery at a time, so no write is ever
// stale. The transitions are decide's.
func (s *sim) sagaStep(ctx context.Context, c *plan.Consumer, in decide.Inbound, ran *string) decide.Decision {
	sg := s.pl.Saga(c.Saga)
	if sg == nil {
		return decide.DeadLetter(c, in, decide.KindFatal, fmt.Sprintf("consumer %q serves saga %q, which is not in the plan", c.ID, c.Saga), s.now)
	}
	if c.Kind == plan.KindSagaTimeout {
		id, _ := decide.SagaInstanceID(in)
		t := decide.SagaTimeoutArrived(sg, c, s.sagas[id], in, s.now)
		if t.Write {
			s.store(t.Instance)
		}
		return t.Decision()
	}
	id, start := decide.SagaInstanceID(in)
	compensation := c.Queue == plan.CompensateQueue(sg.Name, c.Step)
	inst := s.sagas[id]
	if inst == nil && start && !compensation {
		t := decide.SagaStart(sg, c, in, s.now)
		if !t.Write {
			return t.Decision()
		}
		s.store(t.Instance)
		if !t.Run {
			return t.Decision()
		}
		inst = s.sagas[id]
	}
	if t := decide.SagaAccept(sg, c, inst, in, s.now); t != nil {
		return t.Decision()
	}
	if !compensation && sg.Timeout > 0 && decide.SagaNothingDone(*inst) {
		if m, due, ok := decide.SagaTimeoutMessage(sg, *inst, s.now); ok {
			_, _, err := s.b.ladder.Delay(&m, m.Exchange, m.RoutingKey, due, s.now)
			if err == nil {
				err = s.b.publish(m)
			}
			if err != nil {
				return decide.Retry(c, in, fmt.Errorf("saga %q instance %q: its timeout could not be put in the delay ladder: %w", sg.Name, id, err), s.now, 0)
			}
		}
	}
	var stepOutput []byte
	if compensation {
		stepOutput = inst.Steps[inst.Step].Output
	}
	res, callErr := s.handle(ctx, c, in, compensation, stepOutput)
	var t decide.SagaTransition
	switch {
	case callErr == nil && compensation:
		t = decide.SagaCompensationDone(sg, *inst, in.Env.Attempt, in.Env.MessageID, s.now)
		s.comps[id] = append(s.comps[id], c.Step)
	case callErr == nil:
		out := res.Payload
		if res.Stop {
			out = nil
		} else if err := decide.SagaCheckOutput(c, out); err != nil {
			t = decide.SagaStepFailedForGood(sg, *inst, in.Env.Attempt, err.Error(), in.Env.MessageID, s.now)
			break
		}
		*ran = c.Step
		t = decide.SagaStepSucceeded(sg, *inst, out, in.Env.Attempt, in.Env.MessageID, s.now)
	default:
		reason := callErr.Error()
		if !errors.Is(callErr, decide.ErrFatal) {
			if _, more := c.Retry.RungFor(in.Env.Attempt); more {
				return decide.Retry(c, in, callErr, s.now, 0)
			}
			reason = fmt.Sprintf("attempt %d of %d failed: %v", in.Env.Attempt, c.Retry.MaxAttempts, callErr)
		}
		if compensation {
			t = decide.SagaCompensationFailed(sg, *inst, in.Env.Attempt, reason, in.Env.MessageID, s.now)
			s.comps[id] = append(s.comps[id], c.Step)
		} else {
			t = decide.SagaStepFailedForGood(sg, *inst, in.Env.Attempt, reason, in.Env.MessageID, s.now)
		}
	}
	s.store(t.Instance)
	return t.Decision()
}

func (s *sim) store(inst decide.SagaInstance) {
	if _, ok := s.sagas[inst.ID]; !ok {
		s.order = append(s.order, inst.ID)
	}
	i := inst
	s.sagas[inst.ID] = &i
}
