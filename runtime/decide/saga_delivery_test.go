package decide

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// TestSagaBegin checks what a saga consumer's delivery does before its
// handler, on the instance the store holds: the engine and the flow-test
// harness both ask SagaBegin.
func TestSagaBegin(t *testing.T) {
	p := sagaPlan(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	s := sagaOf(t, p, "place-order")
	start := InboundOf(Message{MessageID: "m-1", Body: []byte(`{"id":"o-1","items":[1]}`)})
	first := sagaConsumer("place-order", "take-payment", false)

	b := SagaBegin(s, first, nil, start, now)
	if b.Create == nil || !b.Create.Run || b.Done != nil {
		t.Fatalf("SagaBegin(the starting message, no instance) = %+v, want the instance to create, its first step run here", b)
	}
	inst := b.Create.Instance
	if b := SagaBegin(s, first, &inst, start, now); b.Create != nil || b.Done != nil || b.Compensate {
		t.Fatalf("SagaBegin(the starting message, its instance created) = %+v, want the handler to run", b)
	}
	if !b.TimeoutDue.IsZero() {
		t.Errorf("SagaBegin for a saga without a timeout: timeout due %s, want none", b.TimeoutDue)
	}

	// A step's message for no instance is dead-lettered, never dropped.
	step := InboundOf(Message{MessageID: "m-2", Headers: Table{plan.HeaderSagaID: "gone"}, Body: []byte(`{"id":"o-1"}`)})
	b = SagaBegin(s, sagaConsumer("place-order", "reserve-stock", false), nil, step, now)
	if b.Done == nil || b.Done.Outcome != OutcomeDeadLettered || b.Create != nil {
		t.Fatalf("SagaBegin(a step's message, no instance) = %+v, want it dead-lettered", b)
	}

	// A starting message whose first steps are skipped, delivered to the
	// skipped step's queue, creates the instance and sends the step to run.
	gift := sagaOf(t, p, "gift")
	b = SagaBegin(gift, sagaConsumer("gift", "wrap", false), nil, InboundOf(Message{MessageID: "m-3", Body: []byte(`{"wrap":false}`)}), now)
	if b.Create == nil || b.Create.Run || !slices.Equal(sent(*b.Create), []string{"ship"}) {
		t.Fatalf("SagaBegin(gift's start, wrap skipped) = %+v, want the instance created and ship sent", b)
	}

	// A compensation runs with what its step returned.
	done := SagaStepSucceeded(s, inst, []byte(`{"paid":1}`), 1, "m-1", now).Instance
	failed := SagaStepFailedForGood(s, done, 1, "no stock", "m-4", now).Instance
	comp := sagaConsumer("place-order", "take-payment", true)
	in := InboundOf(Message{MessageID: "m-5", Headers: Table{plan.HeaderSagaID: inst.ID}, Body: inst.Input})
	b = SagaBegin(s, comp, &failed, in, now)
	if b.Done != nil || !b.Compensate || string(b.StepOutput) != `{"paid":1}` {
		t.Fatalf("SagaBegin(take-payment's compensation) = %+v, want it run with the step's output", b)
	}
	// Delivered again once recorded, it is a duplicate.
	undone := SagaCompensationDone(s, failed, 1, "m-5", now).Instance
	if b := SagaBegin(s, comp, &undone, in, now); b.Done == nil || b.Done.Outcome != OutcomeDuplicate {
		t.Fatalf("SagaBegin(take-payment's compensation, recorded) = %+v, want a duplicate", b)
	}
}

// TestSagaAfter checks what a saga handler's outcome does to its instance.
func TestSagaAfter(t *testing.T) {
	p := sagaPlan(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	s := sagaOf(t, p, "place-order")
	start := InboundOf(Message{MessageID: "m-1", Body: []byte(`{"id":"o-1","items":[1]}`)})
	inst := SagaStart(s, sagaConsumer("place-order", "take-payment", false), start, now).Instance
	paid := SagaStepSucceeded(s, inst, []byte(`{}`), 1, "m-1", now).Instance
	failed := SagaStepFailedForGood(s, paid, 1, "no stock", "m-2", now).Instance
	retrying := func(c *plan.Consumer) *plan.Consumer {
		c.Retry = plan.Retry{MaxAttempts: 2, Rungs: []plan.Rung{{Attempt: 2, Queue: c.Queue + ".retry.1s", Delay: plan.Duration(time.Second)}}}
		return c
	}
	step := sagaConsumer("place-order", "take-payment", false)
	comp := sagaConsumer("place-order", "take-payment", true)
	attempt := func(n int) Inbound {
		return InboundOf(Message{MessageID: "m-1", Headers: Table{plan.HeaderAttempt: int64(n)}, Body: inst.Input})
	}
	cases := []struct {
		name    string
		c       *plan.Consumer
		inst    SagaInstance
		in      Inbound
		res     Result
		err     error
		outcome string
		write   bool
		sent    []string
		state   string // the step's state written
		reason  string // in the step's error, or the decision's reason
	}{
		{"a step that returns is recorded and the next step sent", step, inst, attempt(1), Result{Payload: []byte(`{}`)}, nil,
			OutcomeAcknowledged, true, []string{"reserve-stock"}, SagaStepCompleted, ""},
		{"a step that returns nothing is completed all the same", step, inst, attempt(1), Result{Stop: true}, nil,
			OutcomeAcknowledged, true, []string{"reserve-stock"}, SagaStepCompleted, ""},
		{"a fatal step fails for good; with nothing done, nothing is compensated", step, inst, attempt(1), Result{}, errors.Join(ErrFatal, errors.New("card refused")),
			OutcomeAcknowledged, true, nil, SagaStepFailed, "card refused"},
		{"a failure with attempts left is retried, nothing written", retrying(sagaConsumer("place-order", "take-payment", false)), inst, attempt(1), Result{}, errors.New("timeout"),
			OutcomeRetried, false, []string{"place-order.take-payment.retry.1s"}, "", "timeout"},
		{"a failure on the last attempt fails the step for good", retrying(sagaConsumer("place-order", "take-payment", false)), inst, attempt(2), Result{}, errors.New("timeout"),
			OutcomeAcknowledged, true, nil, SagaStepFailed, "attempt 2 of 2 failed: timeout"},
		{"a compensation that returns is recorded and the instance ends", comp, failed, attempt(1), Result{}, nil,
			OutcomeAcknowledged, true, nil, SagaStepCompensated, ""},
		{"a compensation that fails for good is recorded, not undone", comp, failed, attempt(1), Result{}, errors.Join(ErrFatal, errors.New("gone")),
			OutcomeAcknowledged, true, nil, SagaStepCompensationFailed, "gone"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := SagaAfter(s, tc.c, tc.inst, tc.in, tc.res, tc.err, now, 0)
			if tr.Outcome != tc.outcome || tr.Write != tc.write || !slices.Equal(sent(tr), tc.sent) {
				t.Fatalf("SagaAfter = outcome %s, write %v, sent %v; want %s, %v, %v", tr.Outcome, tr.Write, sent(tr), tc.outcome, tc.write, tc.sent)
			}
			if !tc.write {
				if tr.Rung == "" || !strings.Contains(tr.Reason, tc.reason) {
					t.Errorf("SagaAfter retried with rung %q, reason %q; want the rung and a reason with %q", tr.Rung, tr.Reason, tc.reason)
				}
				return
			}
			st := tr.Instance.Steps[tc.inst.Step]
			if st.State != tc.state || !strings.Contains(st.Error, tc.reason) {
				t.Errorf("SagaAfter recorded step %s as %s with error %q; want %s with %q", st.Name, st.State, st.Error, tc.state, tc.reason)
			}
		})
	}
}
