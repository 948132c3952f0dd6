//go:build chaos

package reliability

import (
	"fmt"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// TestChaosS0Baseline calibrates: no fault, as fast as the generator's
// confirms allow, through two idempotent steps on PostgreSQL. It records
// Rmax (runs completed per second) and the p50/p99 publish-to-reply
// latency, and passes with nothing lost, no duplicated effect and no
// redelivery.
func TestChaosS0Baseline(t *testing.T) {
	r := newRig(t, true)
	p := r.start(t)
	before := harness.Snapshot(p)
	n := size(500, 5000)
	start := time.Now()
	if err := r.gen.Publish(0, plain("s0", n)...); err != nil {
		t.Fatal(err)
	}
	r.replies.WaitCount(n, 2*time.Minute)
	elapsed := time.Since(start)
	v, _, _ := r.finish(t, time.Minute)
	if v.DupEffects != 0 {
		t.Errorf("dup_effects = %d with no fault, want 0", v.DupEffects)
	}
	if d := r.replies.Duplicates(); d != 0 {
		t.Errorf("%d duplicate replies with no fault, want 0", d)
	}
	if n := p.Count(`msg="delivery retried"`); n != 0 {
		t.Errorf("%d deliveries retried with no fault, want 0", n)
	}
	ls := r.replies.Latencies(r.gen.Sent)
	rmax := float64(v.Completed) / elapsed.Seconds()
	rmaxMeasured = rmax
	after := harness.Snapshot(p)
	t.Logf("before: %s; after: %s", before, after)
	harness.Record(t, harness.Row{Scenario: "S0 baseline", Faults: "none", Verdict: v,
		Notes: fmt.Sprintf("Rmax %.0f runs/s (2 steps, idempotent, PostgreSQL); p50 %s, p99 %s over %d runs",
			rmax, harness.Percentile(ls, 0.5).Round(time.Millisecond), harness.Percentile(ls, 0.99).Round(time.Millisecond), len(ls))})
}

// rmaxMeasured is S0's figure, when S0 ran first; the others load at half
// of it (research/reliability.md §7.2), 200/s when unknown.
var rmaxMeasured float64

// load is how many messages a scenario sends: with -short, as many as
// the rate sends in seconds (at least 100), so that a loaded machine
// shortens the load rather than stretching the scenario; full otherwise.
func load(seconds, full int) int {
	if !testing.Short() {
		return full
	}
	return max(100, rate()*seconds)
}

func rate() int {
	if rmaxMeasured <= 0 {
		return 200
	}
	r := int(rmaxMeasured / 2)
	if r > 1000 {
		r = 1000
	}
	if r < 50 {
		r = 50
	}
	return r
}
