package decide

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// TestPublishFailed checks what a delivery does once the broker refused a
// publish of its decision, as the engine's group and the flow-test harness
// both carry it out.
func TestPublishFailed(t *testing.T) {
	c := stepConsumer("validate", 0)
	in := delivery(nil, "")
	refused := errors.New("NO_ROUTE")
	dl := DeadLetter(c, in, KindFatal, "broken", now)
	retried := Retry(c, in, errors.New("timeout"), now, 0)
	acked := Decision{Outcome: OutcomeAcknowledged}
	cases := []struct {
		name   string
		dec    Decision
		f      PublishFailure
		hold   bool
		to     string // the routing key of the decision's own publish instead
		reason string // in its reason
	}{
		{"a dead letter .dlq refuses is parked with both reasons", dl, PublishFailure{Kind: PublishUnroutable, Err: refused}, false,
			plan.ParkedQueue(c.Queue), "broken; not dead-lettered"},
		{"a message .parked refuses too is held", Park(c, dl, refused), PublishFailure{Kind: PublishUnroutable, Err: refused}, true, "", ""},
		{"an in-progress delivery its rung refuses is held", InProgress(c, in), PublishFailure{Kind: PublishUnroutable, Err: refused}, true, "", ""},
		{"a delivery held for a store's outage its rung refuses is held, never dead-lettered",
			Hold(c, in, StoreFailure{Store: StoreIdempotency, Err: refused, Unavailable: true}), PublishFailure{Kind: PublishUnroutable, Err: refused}, true, "", ""},
		{"a retry its rung refuses is dead-lettered", retried, PublishFailure{Kind: PublishUnroutable, Err: refused}, false,
			plan.DeadLetterQueue(c.Queue), "timeout; it could not be retried"},
		{"a result whose exchange is missing is dead-lettered naming it", acked, PublishFailure{Kind: PublishNoExchange, Exchange: "gone", Err: refused}, false,
			plan.DeadLetterQueue(c.Queue), `exchange "gone", where the result goes next, does not exist`},
		{"a result AMQP cannot carry is dead-lettered", acked, PublishFailure{Kind: PublishInvalid, Err: refused}, false,
			plan.DeadLetterQueue(c.Queue), "could not be published: NO_ROUTE"},
		{"a result routed nowhere is dead-lettered", acked, PublishFailure{Kind: PublishUnroutable, Err: refused}, false,
			plan.DeadLetterQueue(c.Queue), "could not be routed: NO_ROUTE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fb := PublishFailed(c, in, tc.dec, tc.f, now)
			if fb.Event == "" {
				t.Errorf("PublishFailed(%s, %s) says nothing for the log", tc.dec.Outcome, tc.f.Kind)
			}
			if fb.Hold != tc.hold {
				t.Fatalf("PublishFailed(%s, %s): hold %v, want %v", tc.dec.Outcome, tc.f.Kind, fb.Hold, tc.hold)
			}
			if tc.hold {
				return
			}
			if len(fb.Decision.Publish) == 0 || fb.Decision.Publish[0].RoutingKey != tc.to || !strings.Contains(fb.Decision.Reason, tc.reason) {
				t.Fatalf("PublishFailed(%s, %s) = %+v; want a publish to %s with a reason containing %q", tc.dec.Outcome, tc.f.Kind, fb.Decision, tc.to, tc.reason)
			}
		})
	}
}

// TestANackedPublishIsPublishedAgain: whatever the decision, a publish the
// broker nacked is published again as it was, no attempt spent, no retry
// or dead letter put in its place.
func TestANackedPublishIsPublishedAgain(t *testing.T) {
	c := stepConsumer("validate", 0)
	in := delivery(nil, "")
	nacked := PublishFailure{Kind: PublishNacked, Err: errors.New("basic.nack")}
	for _, dec := range []Decision{
		{Outcome: OutcomeAcknowledged, Publish: []Publish{{Message: Message{RoutingKey: "next"}}}},
		Retry(c, in, errors.New("timeout"), now, 0),
		DeadLetter(c, in, KindFatal, "broken", now),
		InProgress(c, in),
	} {
		fb := PublishFailed(c, in, dec, nacked, now)
		if !fb.Again || fb.Hold || fb.Event == "" {
			t.Fatalf("PublishFailed(%s, nacked) = %+v, want it published again, said in the log", dec.Outcome, fb)
		}
		if fb.Decision.Outcome != dec.Outcome || len(fb.Decision.Publish) != len(dec.Publish) || fb.Decision.Publish[0].RoutingKey != dec.Publish[0].RoutingKey {
			t.Errorf("PublishFailed(%s, nacked) publishes %+v again, want the decision as it was (%+v)", dec.Outcome, fb.Decision, dec)
		}
	}
}

func TestRepublishBackoff(t *testing.T) {
	for _, tc := range []struct {
		failed int
		jitter float64
		want   time.Duration
	}{
		{1, 0, 500 * time.Millisecond}, {2, 0, time.Second}, {3, 0, 2 * time.Second}, {5, 0, 8 * time.Second},
		{6, 0, 10 * time.Second}, {100, 0, 10 * time.Second}, {0, 0, 500 * time.Millisecond},
		{1, 0.5, 562500 * time.Microsecond}, {100, 0.999, 10*time.Second + 2497500*time.Microsecond},
	} {
		if got := RepublishBackoff(tc.failed, tc.jitter); got != tc.want {
			t.Errorf("RepublishBackoff(%d, %v) = %s, want %s", tc.failed, tc.jitter, got, tc.want)
		}
	}
}

func TestMissingExchangeNamesTheRoutingKeyWhenKnown(t *testing.T) {
	c := stepConsumer("validate", 0)
	d := MissingExchange(c, delivery(nil, ""), "shop.next", "pay", now)
	if want := `exchange "shop.next", where the result goes next (routing key "pay"), does not exist on the broker; declare it, or correct the routing slip`; d.Reason != want {
		t.Errorf("MissingExchange reason %q, want %q", d.Reason, want)
	}
	if d.Outcome != OutcomeDeadLettered || d.Publish[0].Headers[plan.HeaderErrorKind] != KindFatal {
		t.Errorf("MissingExchange = %+v, want a fatal dead letter", d)
	}
}

func TestClaimed(t *testing.T) {
	c := stepConsumer("validate", 0)
	in := delivery(nil, "")
	if d := Claimed(c, in, ClaimTaken, now); d != nil {
		t.Errorf("Claimed(taken) = %+v, want nil: the handler runs", d)
	}
	if d := Claimed(c, in, ClaimConfirmed, now); d == nil || d.Outcome != OutcomeDuplicate || len(d.Publish) != 0 {
		t.Errorf("Claimed(confirmed) = %+v, want a duplicate publishing nothing", d)
	}
	if d := Claimed(c, in, ClaimHeld, now); d == nil || d.Outcome != OutcomeInProgress || d.Rung != plan.RetryQueue(c.Queue, plan.InProgressDelay) {
		t.Errorf("Claimed(held) = %+v, want in progress through the 1s rung", d)
	}
	noID := InboundOf(Message{Body: []byte(`{}`)})
	if d := Claimed(c, noID, ClaimTaken, now); d == nil || d.Outcome != OutcomeDeadLettered || d.Reason != ErrNoMessageID.Error() {
		t.Errorf("Claimed(no message id) = %+v, want it dead-lettered with %q", d, ErrNoMessageID)
	}
}

func TestStepDelaysSendTheInputOfADelayedStepIntoTheLadder(t *testing.T) {
	pl := &plan.Plan{Consumers: []plan.Consumer{
		{Kind: plan.KindStep, Pipeline: "p", Step: "later", Delay: plan.Duration(90 * time.Second)},
		{Kind: plan.KindStep, Pipeline: "p", Step: "now"},
	}}
	ds := DelayedSteps(pl)
	if len(ds) != 1 || ds[StepAddress{plan.PipelineExchange("p"), "later"}] != 90*time.Second {
		t.Fatalf("DelayedSteps = %v, want p's step later at 90s", ds)
	}
	c := stepConsumer("validate", 0)
	msg := Message{Exchange: plan.PipelineExchange("p"), RoutingKey: "later", Headers: Table{}}
	dec := Decision{Outcome: OutcomeAcknowledged, Publish: []Publish{{Message: msg}, {Message: Message{Exchange: plan.PipelineExchange("p"), RoutingKey: "now"}}}}
	got := ds.Apply(Ladder{}, c, delivery(nil, ""), dec, now)
	ex, key, due, ok := Destination(got.Publish[0].Headers)
	if !ok || ex != plan.PipelineExchange("p") || key != "later" || !due.Equal(now.Add(90*time.Second)) {
		t.Errorf("Apply: the delayed step's input goes to %s/%s due %s (%v), want p/later due in 90s", ex, key, due, ok)
	}
	if got.Publish[1].RoutingKey != "now" || dec.Publish[0].RoutingKey != "later" {
		t.Errorf("Apply changed what it should not: the undelayed publish goes to %q, the decision's own to %q", got.Publish[1].RoutingKey, dec.Publish[0].RoutingKey)
	}
	long := StepDelays{StepAddress{plan.PipelineExchange("p"), "later"}: 10 * 365 * 24 * time.Hour}
	if d := long.Apply(Ladder{}, c, delivery(nil, ""), dec, now); d.Outcome != OutcomeDeadLettered {
		t.Errorf("Apply of a delay beyond the ladder = %s, want the delivery dead-lettered", d.Outcome)
	}
}
