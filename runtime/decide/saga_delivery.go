package decide

import (
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// One delivery to a saga step's or compensation's consumer, as the engine's
// saga wrapper (runtime/step_saga.go) and the flow-test harness both run
// it: SagaBegin before the handler, on the instance the store holds, and
// SagaAfter on the handler's outcome. Between and around them the caller
// only reads, creates and writes the instance, and calls the handler.

// SagaStarts reports whether a delivery to consumer c of saga s is the
// message that starts an instance: it carries no instance id and is not a
// compensation's. Its instance can be created without being read first
// (a create returns the instance stored when one exists).
func SagaStarts(s *plan.Saga, c *plan.Consumer, in Inbound) bool {
	_, start := SagaInstanceID(in)
	return start && !isCompensation(s, c)
}

// SagaBegun is what a delivery to a saga step's or compensation's consumer
// does before its handler runs. At most one of Create and Done is set;
// with neither, the handler runs.
type SagaBegun struct {
	// Create is the transition of the message that starts an instance
	// (SagaStart): the caller creates Create.Instance unless an instance
	// with its id exists. When the create made it and Create.Run is false,
	// Create is what the delivery does; otherwise the caller asks
	// SagaBegin again with the instance stored.
	Create *SagaTransition
	// Done is decided without the handler: a duplicate, or a dead letter.
	Done *SagaTransition
	// Compensate is true for a compensation's call; StepOutput is then
	// what the step it undoes returned.
	Compensate bool
	StepOutput []byte
	// Timeout, when TimeoutDue is not zero, is the saga's timeout message,
	// to be put into the delay ladder, due then, before the handler runs:
	// the instance's first step to run is about to run. It is sent on
	// every delivery of that step's message, so that a crash before its
	// publish is healed by the redelivery (its id is the instance's).
	Timeout    Message
	TimeoutDue time.Time
}

// SagaBegin decides what a delivery to consumer c of saga s does before
// its handler runs, given the instance the store holds for it (nil: none):
// a starting message with no instance creates one (SagaStart); a message
// the instance does not wait for is a duplicate or a dead letter
// (SagaAccept); otherwise the handler runs.
func SagaBegin(s *plan.Saga, c *plan.Consumer, inst *SagaInstance, in Inbound, now time.Time) SagaBegun {
	if inst == nil && SagaStarts(s, c, in) {
		t := SagaStart(s, c, in, now)
		if !t.Write {
			return SagaBegun{Done: &t} // dead-lettered: nothing created
		}
		return SagaBegun{Create: &t}
	}
	if t := SagaAccept(s, c, inst, in, now); t != nil {
		return SagaBegun{Done: t}
	}
	b := SagaBegun{Compensate: isCompensation(s, c)}
	switch {
	case b.Compensate:
		b.StepOutput = inst.Steps[inst.Step].Output
	case SagaNothingDone(*inst):
		if m, due, ok := SagaTimeoutMessage(s, *inst, now); ok {
			b.Timeout, b.TimeoutDue = m, due
		}
	}
	return b
}

// SagaAfter decides what the handler's outcome on a delivery to consumer c
// of saga s does to instance inst, as SagaBegin found it. A step's result
// is recorded and the next step sent, once it matches the step's output
// type (a mismatch fails the step for good); a compensation's success is
// recorded and the next compensation down sent. A failure with attempts
// left is retried through the consumer's ladder, nothing written (Write
// false); one that is fatal or on the last attempt fails the step for good
// and compensates, or, for a compensation, is recorded and the rest still
// run. jitter is a number in [0,1) drawn by the caller.
func SagaAfter(s *plan.Saga, c *plan.Consumer, inst SagaInstance, in Inbound, res Result, callErr error, now time.Time, jitter float64) SagaTransition {
	attempt, cause := in.Env.Attempt, in.Env.MessageID
	compensation := isCompensation(s, c)
	if callErr == nil {
		if compensation {
			return SagaCompensationDone(s, inst, attempt, cause, now)
		}
		out := res.Payload
		if res.Stop {
			out = nil
		} else if err := SagaCheckOutput(c, out); err != nil {
			return SagaStepFailedForGood(s, inst, attempt, err.Error(), cause, now)
		}
		return SagaStepSucceeded(s, inst, out, attempt, cause, now)
	}
	reason := callErr.Error()
	if !errors.Is(callErr, ErrFatal) {
		if _, more := c.Retry.RungFor(attempt); more {
			return sagaTransitionOf(Retry(c, in, callErr, now, jitter))
		}
		reason = fmt.Sprintf("attempt %d of %d failed: %v", attempt, c.Retry.MaxAttempts, callErr)
	}
	if compensation {
		return SagaCompensationFailed(s, inst, attempt, reason, cause, now)
	}
	return SagaStepFailedForGood(s, inst, attempt, reason, cause, now)
}

// sagaTransitionOf is decision d of a delivery, writing nothing.
func sagaTransitionOf(d Decision) SagaTransition {
	return SagaTransition{Outcome: d.Outcome, Publish: d.Publish, Reason: d.Reason, Rung: d.Rung}
}
