//go:build chaos

package reliability

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// soakInFlight bounds the calls in flight at once in the rig's flow (steps
// a and b, 4 handlers each): the most effects one plugin kill can leave
// applied without an answer.
const soakInFlight = 8

// TestChaosS24Soak runs the load for 15 minutes (90 s under -short) and
// injects, every 60 s (every 15 s under -short), a fault drawn from the
// seed: S4 (the runtime's own broker connections closed, by name), S11
// (every backend of the store's role, made for this test, terminated) or
// S14 (the plugin killed with -9). Nothing is lost; no effect is done
// twice but within the at-least-once window of a killed plugin (the calls
// it had in flight); goroutines and file descriptors return to within 10%
// of the baseline taken after the warm-up, resident memory to within 50%;
// and every work and ladder queue is empty after the drain. S10 (a
// PostgreSQL restart) needs a cluster of the test's own and runs as its
// own scenario; the shared database is never restarted.
func TestChaosS24Soak(t *testing.T) {
	shortIfNamed(t)
	r := newRig(t, true)
	store, role := storeRole(t, r.s.Postgres)
	r.store = store
	rnd := rng(t)
	p := harness.StartRuntime(t, binary, r.s.AMQP, "--store", store, "--create-schema", "--claim-timeout", "5s", r.flow)
	duration := time.Duration(size(90, 15*60)) * time.Second
	every := time.Duration(size(15, 60)) * time.Second
	wait := publishInBackground(t, r, plain("s24", rate()*int(duration/time.Second)))
	r.replies.WaitCount(50, time.Minute)
	time.Sleep(every / 3) // warm-up: pools, channels and the heap settle under the load first
	before := harness.Snapshot(p)
	start := time.Now()
	counts := map[string]int{}
	var timeline []string
	faults := []struct {
		name   string
		inject func() error
	}{
		{"S4", func() error {
			if closeRuntimeConnections(t, r.s.VHost) == 0 {
				return fmt.Errorf("found no runtime connection in vhost %s to close", r.s.VHost)
			}
			return nil
		}},
		{"S11", func() error {
			asPostgres(t, fmt.Sprintf("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '%s'", role))
			return nil
		}},
		{"S14", func() error {
			kids := harness.Children(p.PID())
			if len(kids) == 0 {
				return fmt.Errorf("the runtime has no plugin process to kill")
			}
			return syscall.Kill(kids[0], syscall.SIGKILL)
		}},
	}
	for next := every; next < duration; next += every {
		time.Sleep(time.Until(start.Add(next))) // the plan's fault period
		f := faults[rnd.IntN(len(faults))]
		if err := f.inject(); err != nil {
			t.Errorf("+%s: %s: %v", next, f.name, err)
			continue
		}
		counts[f.name]++
		timeline = append(timeline, fmt.Sprintf("+%s %s", next, f.name))
	}
	wait()
	v, _, _ := r.finish(t, 3*time.Minute)
	t.Logf("fault timeline: %s", strings.Join(timeline, ", "))
	if bound := soakInFlight * counts["S14"]; v.DupEffects > bound {
		t.Errorf("dup_effects = %d, want at most %d: only calls in flight at a plugin kill (%d kills × %d) may be done twice", v.DupEffects, bound, counts["S14"], soakInFlight)
	}
	var busy []string
	for _, q := range harness.Queues(t, r.s.VHost) {
		if q.Name != replyQueue && !strings.HasSuffix(q.Name, ".dlq") && !strings.HasSuffix(q.Name, ".parked") && q.Ready+q.Unacked > 0 {
			busy = append(busy, fmt.Sprintf("%s %d+%d", q.Name, q.Ready, q.Unacked))
		}
	}
	if len(busy) > 0 {
		t.Errorf("queues not empty after the drain: %s", strings.Join(busy, ", "))
	}
	if held := heldClaims(t, store); held != "0" {
		t.Errorf("%s idempotency claims still held after the drain, want 0", held)
	}
	after := harness.Snapshot(p)
	var leaks []string
	within := func(what string, b, a int, pct float64, abs int) {
		if b >= 0 && a >= 0 && float64(a) > float64(b)*(1+pct)+float64(abs) {
			leaks = append(leaks, fmt.Sprintf("%s %d→%d", what, b, a))
		}
	}
	within("goroutines", before.Goroutines, after.Goroutines, 0.1, 5)
	within("fds", before.FDs, after.FDs, 0.1, 5)
	within("rss_kib", before.RSSKiB, after.RSSKiB, 0.5, 0)
	within("plugins", before.Plugins, after.Plugins, 0, 0)
	if len(leaks) > 0 {
		t.Errorf("resources did not return to the baseline: %s (before: %s; after: %s)", strings.Join(leaks, ", "), before, after)
	}
	harness.Record(t, harness.Row{Scenario: "S24 soak, random faults", Faults: fmt.Sprintf("%s: %d× S4, %d× S11, %d× S14, one per %s", duration, counts["S4"], counts["S11"], counts["S14"], every),
		Verdict: v, Leaks: strings.Join(leaks, ", "),
		Notes: fmt.Sprintf("seeded (%d); dup effects = calls in flight at a plugin kill (at-least-once); %s → %s", seed, before, after)})
}
