//go:build chaos

package reliability

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// TestChaosS7SlowNetwork puts the runtime and the generator each behind a
// fault proxy to the broker and runs the same load three times: on a clear
// line, on a slow one (200 ms ± 50 ms each way, 256 KB/s per direction of
// each connection), and on the slow one with every connection of the
// runtime reset (RST) every 10 s. The generator's line is slowed but never
// reset, so each of its publishes has an answer to wait for: fewer than 1%
// of them may go 5 s without a confirm (no confirm-timeout storm). Nothing
// is lost, and each phase's throughput is recorded against the clear
// line's.
func TestChaosS7SlowNetwork(t *testing.T) {
	shortIfNamed(t)
	r := newRig(t, true)
	rproxy, rurl := harness.Before(t, r.s.AMQP, harness.Listen)
	gproxy, gurl := harness.Before(t, r.s.AMQP, harness.Listen)
	r.gen = harness.NewGenerator(t, gurl, replyQueue)
	r.gen.ConfirmTimeout = 5 * time.Second
	p := harness.StartRuntime(t, binary, rurl, "--store", r.store, "--create-schema", "--claim-timeout", "5s", r.flow)
	// A shaped phase sends for its seconds at the clear line's rate, at
	// most most messages: the slow line carries about a seventh of that,
	// so an unbounded phase at full size took a quarter of an hour to
	// drain (23,880 messages at 28 msg/s), while a few thousand waiting
	// measure its throughput as well.
	phases := []struct {
		name           string
		shaped, resets bool
		seconds, most  int
	}{
		{"clear", false, false, size(10, 60), 0},
		{"200±50ms 256KB/s", true, false, size(10, 120), 6000},
		{"slow + reset every 10s", true, true, size(25, 120), 6000},
	}
	var figures []string
	var clear float64
	resets := 0
	for i, ph := range phases {
		for _, px := range []*harness.Proxy{rproxy, gproxy} {
			if ph.shaped {
				px.SetLatency(200*time.Millisecond, 50*time.Millisecond)
				px.SetBandwidth(256 << 10)
			} else {
				px.SetLatency(0, 0)
				px.SetBandwidth(0)
			}
		}
		stop := make(chan struct{})
		stopped := make(chan int)
		go func() {
			n := 0
			defer func() { stopped <- n }()
			if !ph.resets {
				<-stop
				return
			}
			tick := time.NewTicker(10 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					if rproxy.Reset() > 0 {
						n++
					}
				case <-stop:
					return
				}
			}
		}()
		n := rate() * ph.seconds
		if ph.most > 0 {
			n = min(n, ph.most)
		}
		msgs := plain(fmt.Sprintf("s7p%d", i), n)
		ids := make([]string, len(msgs))
		for j, m := range msgs {
			ids[j] = m.ID
		}
		began := time.Now()
		if err := r.gen.Publish(rate(), msgs...); err != nil {
			t.Errorf("phase %q: generator: %v", ph.name, err)
		}
		missing := r.replies.WaitFor(ids, 3*time.Minute)
		took := time.Since(began)
		close(stop)
		resets += <-stopped
		if missing > 0 {
			t.Errorf("phase %q: %d of %d runs had not replied 3 minutes after the phase began", ph.name, missing, len(ids))
		}
		tput := float64(len(ids)-missing) / took.Seconds()
		if i == 0 {
			clear = tput
		}
		figures = append(figures, fmt.Sprintf("%s %.0f msg/s (%.2f×)", ph.name, tput, tput/clear))
		t.Logf("phase %q: %d messages in %s: %.0f msg/s", ph.name, len(ids), took.Round(time.Millisecond), tput)
	}
	rproxy.SetLatency(0, 0)
	rproxy.SetBandwidth(0)
	v, _, _ := r.finish(t, 2*time.Minute)
	sent := r.gen.Sent.Len()
	if info := len(r.gen.Sent.IDs(harness.Info)); float64(info) >= 0.01*float64(sent) {
		t.Errorf("%d of %d publishes went 5s without a confirm across the slow line, want fewer than 1%%", info, sent)
	}
	// Latency and bandwidth alone redo nothing: a duplicate effect comes
	// from a reset, which cuts a step's output publish before its confirm
	// (the step is then handled again: at-least-once).
	slowDups := 0
	for run, steps := range r.ledger.Effects(t) {
		if strings.HasPrefix(run, "s7p0-") || strings.HasPrefix(run, "s7p1-") {
			for _, n := range steps {
				slowDups += n - 1
			}
		}
	}
	if slowDups != 0 {
		t.Errorf("%d effects done twice in the phases without resets, want 0: a slow line alone must not cause a redelivery", slowDups)
	}
	if failed := p.Count(`msg="publish failed; the message goes back to its queue"`); v.DupEffects > failed {
		t.Errorf("dup_effects = %d but only %d publishes failed: each effect done twice must be a step redone after its output's publish was cut", v.DupEffects, failed)
	}
	if resets < 2 {
		t.Errorf("the runtime's connections were reset %d times, want at least 2 (one every 10s)", resets)
	}
	if _, code, err := p.Get("/readyz"); err != nil || code != 200 {
		t.Errorf("/readyz = %d (%v) once the line is clear again, want 200; log:\n%s", code, err, harness.Tail(p.Log(), 30))
	}
	harness.Record(t, harness.Row{Scenario: "S7 slow and flaky network", Faults: fmt.Sprintf("latency 200±50ms, 256KB/s, then %d resets (1/10s)", resets), Verdict: v,
		Notes: fmt.Sprintf("throughput %s; confirm timeouts (5s) %d of %d; %d reconnections; dup effects all in the reset phase (0 before it), steps redone after a reset cut their output's publish (%d publishes failed, %d deliveries retried): at-least-once",
			strings.Join(figures, ", "), len(r.gen.Sent.IDs(harness.Info)), sent, p.Count(`msg="connection re-established"`),
			p.Count(`msg="publish failed; the message goes back to its queue"`), p.Count(`msg="delivery retried"`))})
}
