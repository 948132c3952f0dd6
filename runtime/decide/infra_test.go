package decide

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

func TestOnStoreFailure(t *testing.T) {
	c := stepConsumer("reserve", 1)
	down := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	cases := []struct {
		name     string
		attempt  int64
		f        StoreFailure
		outcome  string
		to       string // the queue of the one publish
		attempt2 int64  // its x-acemq-attempt
	}{
		{"an outage of the idempotency store holds the delivery round the 1s rung, no attempt spent", 1,
			StoreFailure{Store: StoreIdempotency, Err: down, Unavailable: true}, OutcomeHeld, plan.RetryQueue(c.Queue, plan.InProgressDelay), 1},
		{"an outage on the last attempt still holds it, never dead-lettered", 3,
			StoreFailure{Store: StoreSaga, Err: down, Unavailable: true}, OutcomeHeld, plan.RetryQueue(c.Queue, plan.InProgressDelay), 3},
		{"an outage of the blob store holds it too", 2,
			StoreFailure{Store: StoreBlobs, Err: down, Unavailable: true}, OutcomeHeld, plan.RetryQueue(c.Queue, plan.InProgressDelay), 2},
		{"a store's refusal that is no outage is retried through the ladder, spending an attempt", 1,
			StoreFailure{Store: StoreSaga, Err: errors.New("written by others 3 times")}, OutcomeRetried, c.Retry.Rungs[0].Queue, 2},
		{"a store's refusal on the last attempt is dead-lettered as exhausted", 3,
			StoreFailure{Store: StoreIdempotency, Err: errors.New("lock timeout")}, OutcomeDeadLettered, plan.DeadLetterQueue(c.Queue), 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := delivery(Table{plan.HeaderAttempt: tc.attempt, "x-death": []any{"old"}}, "")
			d := OnStoreFailure(c, in, tc.f, now, 0.5)
			if d.Outcome != tc.outcome {
				t.Fatalf("OnStoreFailure(%s, attempt %d) outcome = %s, want %s", tc.f.Store, tc.attempt, d.Outcome, tc.outcome)
			}
			if len(d.Publish) != 1 || d.Publish[0].RoutingKey != tc.to {
				t.Fatalf("OnStoreFailure(%s) publishes %+v, want one message to %s", tc.f.Store, d.Publish, tc.to)
			}
			p := d.Publish[0]
			if got := p.Headers[plan.HeaderAttempt]; got != tc.attempt2 {
				t.Errorf("OnStoreFailure(%s) x-acemq-attempt = %v, want %d", tc.f.Store, got, tc.attempt2)
			}
			if tc.outcome == OutcomeHeld {
				if _, ok := p.Headers["x-death"]; ok {
					t.Error("a held message keeps x-death: the broker's cycle check could drop it")
				}
				if p.Expiration != "" || p.DeliveryMode != Persistent {
					t.Errorf("held message expiration %q, delivery mode %d; want none and persistent", p.Expiration, p.DeliveryMode)
				}
				if !strings.Contains(d.Reason, tc.f.Store+" store unavailable") {
					t.Errorf("held reason %q does not name the %s store", d.Reason, tc.f.Store)
				}
			}
		})
	}
}

func TestPauseBackoff(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for failed, w := range want {
		if got := PauseBackoff(failed); got != w {
			t.Errorf("PauseBackoff(%d) = %s, want %s", failed, got, w)
		}
	}
	if got := PauseBackoff(1000); got != PauseMaxProbe {
		t.Errorf("PauseBackoff(1000) = %s, want %s", got, PauseMaxProbe)
	}
}
