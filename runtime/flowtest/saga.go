package flowtest

import (
	"context"
	"fmt"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// sagaStep is the engine's saga wrapper (runtime/step_saga.go) on an
// in-memory instance store: decide's SagaBegin and SagaAfter around the
// call, one delivery at a time, so that no write is ever stale.
func (s *sim) sagaStep(ctx context.Context, c *plan.Consumer, in decide.Inbound, ran *string) decide.Decision {
	sg := s.pl.Saga(c.Saga)
	if sg == nil {
		return decide.DeadLetter(c, in, decide.KindFatal, fmt.Sprintf("consumer %q serves saga %q, which is not in the plan", c.ID, c.Saga), s.now)
	}
	id, _ := decide.SagaInstanceID(in)
	if c.Kind == plan.KindSagaTimeout {
		t := decide.SagaTimeoutArrived(sg, c, s.sagas[id], in, s.now)
		if t.Write {
			s.store(t.Instance)
		}
		return t.Decision()
	}
	b := decide.SagaBegin(sg, c, s.sagas[id], in, s.now)
	if b.Create != nil {
		s.store(b.Create.Instance) // no instance yet: the create makes it
		if !b.Create.Run {
			return b.Create.Decision()
		}
		b = decide.SagaBegin(sg, c, s.sagas[id], in, s.now)
	}
	if b.Done != nil {
		return b.Done.Decision()
	}
	if !b.TimeoutDue.IsZero() {
		m := b.Timeout
		_, _, err := s.b.ladder.Delay(&m, m.Exchange, m.RoutingKey, b.TimeoutDue, s.now)
		if err == nil {
			err = s.b.publish(m)
		}
		if err != nil {
			return decide.Retry(c, in, fmt.Errorf("saga %q instance %q: its timeout could not be put in the delay ladder: %w", sg.Name, id, err), s.now, 0)
		}
	}
	inst := *s.sagas[id]
	res, callErr := s.handle(ctx, c, in, b.Compensate, b.StepOutput)
	t := decide.SagaAfter(sg, c, inst, in, res, callErr, s.now, 0)
	if !t.Write {
		return t.Decision()
	}
	switch {
	case b.Compensate:
		s.comps[id] = append(s.comps[id], c.Step)
	case t.Instance.Steps[inst.Step].State == decide.SagaStepCompleted:
		*ran = c.Step
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
