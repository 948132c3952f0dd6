//go:build chaos

package reliability

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// notStar skips a scenario outside the ★ subset under -short: it runs in
// `make chaos`, not in `make chaos-short`.
func notStar(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("not in the ★ subset: make chaos runs it")
	}
}

// TestChaosS2Kill9WithoutIdempotency is S1 with idempotency off: nothing
// may be lost; effects done twice are allowed and reported, the figure
// that documents at-least-once.
func TestChaosS2Kill9WithoutIdempotency(t *testing.T) {
	notStar(t)
	r := newRig(t, false)
	rnd := rng(t)
	p := r.start(t)
	wait := publishInBackground(t, r, plain("s2", load(10, 6000)))
	for range 5 {
		time.Sleep(time.Duration(300+rnd.IntN(1700)) * time.Millisecond) // the fault's moment, chosen at random (seeded)
		p.Signal(syscall.SIGKILL)
		if _, ok := p.Wait(30 * time.Second); !ok {
			t.Fatal("the runtime did not die within 30s of SIGKILL")
		}
		if left := waitNoPlugins(10 * time.Second); len(left) > 0 {
			t.Errorf("plugin processes %v outlived the runtime killed with -9", left)
		}
		time.Sleep(time.Second) // the plan's pause before the restart
		p = r.start(t)
	}
	wait()
	v, _, _ := r.finish(t, 2*time.Minute)
	harness.Record(t, harness.Row{Scenario: "S2 kill -9 ×5, idempotency off", Faults: "5× kill -9, restart after 1s", Verdict: v,
		Notes: fmt.Sprintf("dup effects allowed (at-least-once) and reported; %d duplicate replies", r.replies.Duplicates())})
}

// TestChaosS6SilentPartition puts a fault proxy between the runtime and
// the broker and holds the line silent (no RST, no FIN) under load: the
// heartbeat (5s) notices it, /readyz says not ready while partitioned, and
// once the line heals the runtime reconnects, is ready again and loses
// nothing.
func TestChaosS6SilentPartition(t *testing.T) {
	notStar(t)
	r := newRig(t, true)
	proxy, through := harness.Before(t, r.s.AMQP, harness.Listen)
	p := harness.StartRuntime(t, binary, through, "--store", r.store, "--create-schema", "--claim-timeout", "5s", r.flow)
	wait := publishInBackground(t, r, plain("s6", load(10, 6000)))
	r.replies.WaitCount(50, time.Minute)
	proxy.SetMode(harness.Blackhole)
	cut := time.Now()
	var unready time.Duration
	for time.Since(cut) < time.Duration(size(25, 45))*time.Second {
		if _, code, err := p.Get("/readyz"); unready == 0 && err == nil && code != 200 {
			unready = time.Since(cut)
		}
		time.Sleep(200 * time.Millisecond) // /readyz is polled; it has no event
	}
	proxy.SetMode(harness.Pass)
	healed := time.Now()
	var ready time.Duration
	for time.Since(healed) < time.Minute {
		if _, code, err := p.Get("/readyz"); err == nil && code == 200 {
			ready = time.Since(healed)
			break
		}
		time.Sleep(200 * time.Millisecond) // as above
	}
	if unready == 0 {
		t.Errorf("/readyz answered ready throughout a %s silent partition", time.Duration(size(25, 45))*time.Second)
	}
	if ready == 0 {
		t.Errorf("/readyz was not ready a minute after the partition healed; log:\n%s", harness.Tail(p.Log(), 30))
	}
	wait()
	v, _, _ := r.finish(t, 2*time.Minute)
	harness.Record(t, harness.Row{Scenario: "S6 silent partition", Faults: fmt.Sprintf("blackhole %ds through the fault proxy", size(25, 45)), Verdict: v,
		Recovery: fmt.Sprintf("ready %.1fs after heal", ready.Seconds()),
		Notes:    fmt.Sprintf("/readyz unready %.1fs into the partition (heartbeat 5s: bound 16s)", unready.Seconds())})
}
