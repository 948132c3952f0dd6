//go:build chaos

package reliability

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// noConfirmLine is in the runtime's log each time a publishing channel
// is closed because its oldest publish waited past the confirm deadline.
const noConfirmLine = `msg="no confirm from the broker`

// TestChaosS5bConfirmsLost is S5's wedge with its cause made on purpose:
// under load, the broker stops confirming the publishes of every channel
// the runtime has open, as RabbitMQ before 4.2 can after a node's
// disconnection (rabbitmq-server#14589: a quorum queue's client never
// sends a lost message again, and the queue then takes that channel's
// later publishes without enqueuing or confirming them). The fault proxy
// drops the basic.ack and basic.nack frames of those channels until each
// is opened again; the messages still reach their queues, which to the
// runtime is the same: publishes without a confirm. The steps' outputs
// wait on their confirms, so each consumer's prefetch fills with
// deliveries it holds and cannot finish, the shape in which S5 once wedged
// for minutes. The confirm deadline (30 s) must close the channels and
// open them again: the deliveries whose output had no confirm are handled
// again (at-least-once), work goes on, nothing is lost, and no consumer
// stays held long enough to be reported stalled.
func TestChaosS5bConfirmsLost(t *testing.T) {
	r := newRig(t, true)
	proxy, through := harness.Before(t, r.s.AMQP, harness.ListenAMQP)
	p := harness.StartRuntime(t, binary, through, "--store", r.store, "--create-schema", "--claim-timeout", "5s", r.flow)
	wait := publishInBackground(t, r, plain("s5b", load(20, 20000)))
	if !r.replies.WaitCount(50, time.Minute) {
		t.Fatalf("no 50 runs replied within a minute before the fault; log:\n%s", harness.Tail(p.Log(), 30))
	}

	taken := proxy.LoseConfirms()
	cut := time.Now()
	seen := r.replies.Len()
	var closed time.Duration
	unready, samples := 0, 0
	for time.Since(cut) < 2*time.Minute {
		if p.Count(noConfirmLine) > 0 {
			closed = time.Since(cut)
			break
		}
		samples++
		if _, code, err := p.Get("/readyz"); err == nil && code != 200 {
			unready++
		}
		time.Sleep(200 * time.Millisecond) // the log and /readyz are polled
	}
	lost := proxy.ConfirmsLost()
	if lost == 0 {
		t.Fatalf("the proxy dropped no confirm of the %d channels it took (the fault did not happen)", taken)
	}
	if closed == 0 {
		status, _, _ := p.Get("/v1/status")
		t.Fatalf("no publishing channel was closed for its missing confirms within 2m of the fault (%d confirms dropped, %d runs replied since); status: %s\nlog:\n%s",
			lost, r.replies.Len()-seen, status, harness.Tail(p.Log(), 30))
	}
	if n := p.Count(`msg="connection lost`); n > 0 {
		// The fault is the confirms alone: a connection that dropped
		// would have recovered the work another way.
		t.Errorf("the runtime lost %d connections during the fault (heartbeats must still pass); log:\n%s", n, harness.Tail(p.Log(), 30))
	}
	between := r.replies.Len() - seen // outputs published before the fault
	if !r.replies.WaitCount(r.replies.Len()+50, time.Minute) {
		t.Errorf("%d runs replied in the minute after the channels were opened again, want progress; log:\n%s", r.replies.Len()-seen, harness.Tail(p.Log(), 30))
	}
	status, _, _ := p.Get("/v1/status")
	if strings.Contains(status, `"stalled"`) {
		t.Errorf("a consumer is reported stalled after the channels were opened again: %s", status)
	}
	wait()
	v, _, _ := r.finish(t, 3*time.Minute)
	harness.Record(t, harness.Row{Scenario: "S5b confirms lost (rabbitmq-server#14589)", Faults: fmt.Sprintf("the broker's confirms dropped on the runtime's %d open channels until each was opened again", taken), Verdict: v,
		Recovery: fmt.Sprintf("channels closed and opened again %.1fs after the fault (confirm deadline 30s)", closed.Seconds()),
		Notes: fmt.Sprintf("%d confirms dropped; %d runs replied between the fault and the channels' close (outputs published before it); publishing channels closed for a missing confirm: %d; /readyz not ready in %d of %d samples meanwhile",
			lost, between, p.Count(noConfirmLine), unready, samples)})
}
