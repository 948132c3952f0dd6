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

// publishInBackground publishes msgs at the scenario's rate in a goroutine
// of its own; the returned function waits for it and fails the test on a
// publish error.
func publishInBackground(t *testing.T, r *rig, msgs []harness.Message) (wait func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.gen.Publish(rate(), msgs...) }()
	return func() {
		t.Helper()
		if err := <-done; err != nil {
			t.Errorf("generator: %v", err)
		}
	}
}

// waitNoPlugins waits until no recorder process is left (a killed runtime
// must not leave its plugins behind) and returns the orphans seen last.
func waitNoPlugins(d time.Duration) []int {
	end := time.Now().Add(d)
	for {
		pids := harness.ProcessesOf(recorder)
		if len(pids) == 0 || time.Now().After(end) {
			return pids
		}
		time.Sleep(50 * time.Millisecond) // process exit has no event a non-parent can wait on
	}
}

func heldClaims(t *testing.T, store string) string {
	t.Helper()
	return harness.PSQL(t, store, "SELECT count(*) FROM acemq_idempotency WHERE state = 'claimed'")
}

// TestChaosS1Kill9UnderLoad kills the runtime with -9 five times under
// load, at random points (mid-handler, between a claim and its confirm,
// between a step's publish and its ack: wherever the random moment falls),
// restarting it after 1 s. Nothing confirmed may be lost, no plugin may
// outlive its runtime, and no claim may stay held once drained. Effects a
// killed runtime applied before it could confirm their claim are applied
// again once the lease ends: they are counted and reported, the
// at-least-once window of a handler's effect outside the store.
func TestChaosS1Kill9UnderLoad(t *testing.T) {
	r := newRig(t, true)
	rnd := rng(t)
	p := r.start(t)
	wait := publishInBackground(t, r, plain("s1", load(10, 6000)))
	var resume time.Duration
	var orphans []int
	kills := 0
	var timeline []string
	for kills < 5 {
		at := time.Duration(300+rnd.IntN(1700)) * time.Millisecond
		time.Sleep(at) // the fault's moment, chosen at random (seeded)
		timeline = append(timeline, fmt.Sprintf("+%s", at))
		p.Signal(syscall.SIGKILL)
		if _, ok := p.Wait(30 * time.Second); !ok {
			t.Fatal("the runtime did not die within 30s of SIGKILL")
		}
		kills++
		if left := waitNoPlugins(10 * time.Second); len(left) > 0 {
			orphans = append(orphans, left...)
			t.Errorf("plugin processes %v outlived the runtime killed with -9", left)
		}
		time.Sleep(time.Second) // the plan's pause before the restart
		seen := r.replies.Len()
		restarted := time.Now()
		p = r.start(t)
		if seen < r.gen.Sent.Len() && r.replies.WaitCount(seen+1, 30*time.Second) {
			if d := time.Since(restarted); d > resume {
				resume = d
			}
		}
	}
	wait()
	v, _, _ := r.finish(t, 2*time.Minute)
	if held := heldClaims(t, r.store); held != "0" {
		t.Errorf("%s idempotency claims still held after the drain, want 0", held)
	}
	t.Logf("kill timeline: %s", strings.Join(timeline, " "))
	harness.Record(t, harness.Row{Scenario: "S1 kill -9 runtime ×5", Faults: fmt.Sprintf("%d× kill -9, restart after 1s", kills), Verdict: v,
		Recovery: fmt.Sprintf("%.1fs", resume.Seconds()), Leaks: orphanNote(orphans),
		Notes: fmt.Sprintf("idempotency on, lease 5s; dup effects = effects applied by a killed runtime before its claim was confirmed (at-least-once); %d duplicate replies", r.replies.Duplicates())})
}

func orphanNote(pids []int) string {
	if len(pids) == 0 {
		return ""
	}
	return fmt.Sprintf("orphan plugins %v", pids)
}

// TestChaosS3SigtermDrain sends SIGTERM under load: the runtime stops
// consuming, lets the handlers in flight finish within --drain-timeout
// (10s), exits with its plugins, and a restarted runtime takes the rest.
// Nothing is lost and nothing is done twice: a drain causes no
// redelivery of work already done.
func TestChaosS3SigtermDrain(t *testing.T) {
	r := newRig(t, true)
	p := r.start(t)
	n := load(8, 5000)
	wait := publishInBackground(t, r, plain("s3", n))
	r.replies.WaitCount(n/3, time.Minute)
	plugins := harness.Children(p.PID())
	signalled := time.Now()
	p.Signal(syscall.SIGTERM)
	err, ok := p.Wait(30 * time.Second)
	drain := time.Since(signalled)
	if !ok {
		t.Fatalf("the runtime had not exited 30s after SIGTERM (drain timeout 10s); log:\n%s", harness.Tail(p.Log(), 30))
	}
	if err != nil {
		t.Errorf("the runtime exited with %v after SIGTERM, want status 0", err)
	}
	if drain > 15*time.Second {
		t.Errorf("the drain took %s, more than the 10s drain timeout and 5s to exit", drain)
	}
	for _, pid := range plugins {
		if u := harness.ProcUsage(pid); u.FDs > 0 {
			t.Errorf("plugin %d still runs after its runtime drained", pid)
		}
	}
	if !strings.Contains(p.Log(), `msg=drained`) && !strings.Contains(p.Log(), `msg="consumer drained"`) {
		t.Errorf("the runtime never logged its drain; log:\n%s", harness.Tail(p.Log(), 30))
	}
	r.start(t)
	wait()
	v, _, _ := r.finish(t, 2*time.Minute)
	if v.DupEffects != 0 {
		t.Errorf("dup_effects = %d after a graceful drain, want 0: a drain must not redo finished work", v.DupEffects)
	}
	harness.Record(t, harness.Row{Scenario: "S3 SIGTERM drain", Faults: "1× SIGTERM at 1/3 of the load", Verdict: v,
		Recovery: fmt.Sprintf("drain %.1fs", drain.Seconds()),
		Notes:    fmt.Sprintf("drain timeout 10s; %d plugin processes exited with the runtime", len(plugins))})
}

// closeRuntimeConnections force-closes the connections of the runtime in
// vhost, by name (the runtime names its connections "acemq-flow…" in
// the client property connection_name), and
// never another client's: the shared broker serves other tests.
func closeRuntimeConnections(t *testing.T, vhost string) int {
	t.Helper()
	out := harness.Rabbitmqctl(t, "list_connections", "-q", "--no-table-headers", "pid", "vhost", "client_properties")
	n := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != vhost || !strings.Contains(line, `"connection_name","acemq-flow`) {
			continue
		}
		if _, err := harness.RabbitmqctlErr("close_connection", f[0], "closed by the reliability suite"); err == nil {
			n++
		}
	}
	return n
}

// TestChaosS4ConnectionsClosed force-closes every connection of the
// runtime three times under load: it reconnects and its consumers are
// registered again, nothing is lost, no "unknown delivery tag" (a stale
// ack on a new channel) is ever sent, and goroutines and FDs do not grow.
func TestChaosS4ConnectionsClosed(t *testing.T) {
	r := newRig(t, true)
	p := r.start(t)
	wait := publishInBackground(t, r, plain("s4", load(8, 6000)))
	r.replies.WaitCount(50, time.Minute)
	before := harness.Snapshot(p)
	var worst time.Duration
	cuts := 0
	for range 3 {
		reconnects := p.Count(`msg="connection re-established"`)
		closed := closeRuntimeConnections(t, r.s.VHost)
		if closed == 0 {
			t.Fatalf("found no runtime connection in vhost %s to close", r.s.VHost)
		}
		cuts++
		at := time.Now()
		end := at.Add(30 * time.Second)
		for p.Count(`msg="connection re-established"`) < reconnects+closed && time.Now().Before(end) {
			p.WaitLog(`msg="connection re-established"`, 100*time.Millisecond)
		}
		for time.Now().Before(end) {
			if consumersOn(t, r.s.VHost, "work.a") > 0 && consumersOn(t, r.s.VHost, "work.b") > 0 {
				break
			}
			time.Sleep(100 * time.Millisecond) // the broker's consumer list has no event
		}
		if d := time.Since(at); d > worst {
			worst = d
		}
		time.Sleep(time.Duration(size(3, 20)) * time.Second) // the plan's spacing between cuts
	}
	t.Logf("cuts done at %s", time.Now().Format(time.StampMilli))
	wait()
	t.Logf("load published at %s", time.Now().Format(time.StampMilli))
	v, _, _ := r.finish(t, 2*time.Minute)
	t.Logf("drained at %s", time.Now().Format(time.StampMilli))
	if c := consumersOn(t, r.s.VHost, "work.a"); c == 0 {
		t.Error("no consumer on work.a after the cuts")
	}
	if k := strings.Count(p.Log(), "unknown delivery tag"); k != 0 {
		t.Errorf("%d \"unknown delivery tag\" errors: an ack crossed onto a new channel", k)
	}
	after := harness.Snapshot(p)
	leaks := harness.Leaks(before, after)
	if leaks != "" {
		t.Errorf("resources grew across 3 reconnections: %s (before: %s; after: %s)", leaks, before, after)
	}
	harness.Record(t, harness.Row{Scenario: "S4 connections closed ×3", Faults: fmt.Sprintf("%d× close_connection of the runtime's connections", cuts), Verdict: v,
		Recovery: fmt.Sprintf("%.1fs", worst.Seconds()), Leaks: leaks,
		Notes: fmt.Sprintf("reconnect and consumers back on the broker, worst of %d; %s → %s", cuts, before, after)})
}

// consumersOn counts the consumers the broker lists on queue, from
// rabbitmqctl: the management API's list lags by its statistics interval
// and would show consumers of channels already closed.
func consumersOn(t *testing.T, vhost, queue string) int {
	t.Helper()
	out := harness.Rabbitmqctl(t, "list_consumers", "-p", vhost, "-q", "--no-table-headers", "queue_name")
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == queue {
			n++
		}
	}
	return n
}

// TestChaosS14PluginKilled kills the recorder's process with -9 every
// couple of seconds under load: each call in flight fails retryably and
// climbs the ladder, the host restarts the plugin, nothing is lost, and
// the restart counter counts every kill.
func TestChaosS14PluginKilled(t *testing.T) {
	r := newRig(t, true)
	p := r.start(t)
	wait := publishInBackground(t, r, plain("s14", load(10, 5000)))
	r.replies.WaitCount(50, time.Minute)
	kills := 0
	var worst time.Duration
	for range 5 {
		kids := harness.Children(p.PID())
		if len(kids) == 0 {
			t.Fatal("the runtime has no plugin process to kill")
		}
		_ = syscall.Kill(kids[0], syscall.SIGKILL)
		kills++
		at := time.Now()
		for time.Since(at) < 30*time.Second {
			if k := harness.Children(p.PID()); len(k) > 0 && k[0] != kids[0] {
				break
			}
			time.Sleep(20 * time.Millisecond) // a respawn has no event outside the runtime
		}
		if d := time.Since(at); d > worst {
			worst = d
		}
		time.Sleep(time.Duration(size(2, 10)) * time.Second) // the plan's spacing between kills
	}
	wait()
	v, _, _ := r.finish(t, 2*time.Minute)
	restarts, err := p.Metric(`acemq_plugin_restarts_total{plugin="recorder"}`)
	if err != nil || int(restarts) < kills {
		t.Errorf("acemq_plugin_restarts_total = %v (%v), want at least %d, one per kill", restarts, err, kills)
	}
	harness.Record(t, harness.Row{Scenario: "S14 kill -9 plugin ×5", Faults: fmt.Sprintf("%d× kill -9 of the plugin", kills), Verdict: v,
		Recovery: fmt.Sprintf("respawn %.1fs", worst.Seconds()),
		Notes:    fmt.Sprintf("restart counter %v; dup effects = effects applied before the kill whose call then failed (at-least-once)", restarts)})
}
