//go:build chaos

package reliability

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// shortIfNamed is notStar for a scenario that has a short form: under
// -short it runs (in that form) only when -run names it, as in
// `go test -tags chaos -short -run TestChaosS24 ./test/reliability`;
// `make chaos-short` runs the ★ subset and skips it.
func shortIfNamed(t *testing.T) {
	t.Helper()
	if !testing.Short() {
		return
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(t.Name(), "TestChaos"), "_")
	for i, c := range id {
		if i > 0 && (c < '0' || c > '9') {
			id = id[:i]
			break
		}
	}
	if f := flag.Lookup("test.run"); f == nil || !strings.Contains(f.Value.String(), "TestChaos"+id) {
		t.Skipf("not in the ★ subset: make chaos runs it, and -short -run TestChaos%s its short form", id)
	}
}

// editFlow replaces old with new in the rig's flow file; old must be
// there.
func editFlow(t *testing.T, r *rig, old, new string) {
	t.Helper()
	b, err := os.ReadFile(r.flow)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("the flow has no %q to replace", old)
	}
	if err := os.WriteFile(r.flow, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// gone reports whether pid no longer runs (exited, or a zombie its
// parent has not reaped yet).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

// TestChaosS15HungPlugin freezes the recorder's process with SIGSTOP
// under load (a plugin that hangs: alive, its sockets open, answering
// nothing) and lets it go with SIGCONT once the test is done with it.
// Each call's deadline (2s) fires, the host declares the plugin hung,
// kills its process group (SIGKILL reaches a stopped process) and starts
// another, the calls that timed out go round the retry ladder, and
// nothing is lost. From SIGSTOP to the new process: the timeout, the
// hang grace (1s) and at most 5s for the kill and the restart.
func TestChaosS15HungPlugin(t *testing.T) {
	shortIfNamed(t)
	r := newRig(t, true)
	const timeout, grace = 2 * time.Second, time.Second
	editFlow(t, r, "timeout: 5s", "timeout: 2s")
	p := r.start(t)
	wait := publishInBackground(t, r, plain("s15", load(10, 5000)))
	r.replies.WaitCount(50, time.Minute)
	var worst, worstKill time.Duration
	freezes := 0
	for range size(2, 5) {
		kids := harness.Children(p.PID())
		if len(kids) != 1 {
			t.Fatalf("the runtime has plugin processes %v, want one recorder", kids)
		}
		frozen := kids[0]
		if err := syscall.Kill(frozen, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		freezes++
		at := time.Now()
		// A frozen plugin shows only in a call to it: a few runs sent now
		// make sure one comes, though the load may have been handled
		// already (at full size on a quiet machine it is, before the last
		// freezes).
		if err := r.gen.Publish(0, plain(fmt.Sprintf("s15f%d", freezes), 20)...); err != nil {
			t.Errorf("publish after the freeze: %v", err)
		}
		var next int
		var killed time.Duration
		for time.Since(at) < 30*time.Second {
			if killed == 0 && gone(frozen) {
				killed = time.Since(at)
			}
			if k := harness.Children(p.PID()); killed > 0 && len(k) == 1 && k[0] != frozen {
				next = k[0]
				break
			}
			time.Sleep(20 * time.Millisecond) // a kill and a restart have no event outside the runtime
		}
		took := time.Since(at)
		_ = syscall.Kill(frozen, syscall.SIGCONT) // a no-op once it is gone, as it should be
		if next == 0 {
			t.Fatalf("30s after SIGSTOP the frozen plugin %d is gone=%v and the runtime's plugins are %v, want it killed and another started; log:\n%s",
				frozen, gone(frozen), harness.Children(p.PID()), harness.Tail(p.Log(), 30))
		}
		worst, worstKill = max(worst, took), max(worstKill, killed)
		time.Sleep(time.Duration(size(2, 10)) * time.Second) // the spacing between freezes
	}
	wait()
	v, _, _ := r.finish(t, 2*time.Minute)
	if bound := timeout + grace + 5*time.Second; worstKill > bound {
		t.Errorf("a frozen plugin was killed %s after SIGSTOP, want ≤ %s (timeout %s, hang grace %s, the kill ≤ 5s)", worstKill, bound, timeout, grace)
	}
	if hung := p.Count("plugin stopped answering"); hung < freezes {
		t.Errorf("the runtime logged a hung plugin %d times for %d freezes; log:\n%s", hung, freezes, harness.Tail(p.Log(), 30))
	}
	retried := p.Count(`msg="delivery retried"`)
	if retried == 0 {
		t.Error("no delivery was retried: the calls a frozen plugin held must time out and go round the ladder")
	}
	if k := strings.Count(p.Log(), "PRECONDITION_FAILED"); k != 0 {
		t.Errorf("%d PRECONDITION_FAILED in the log: the broker's consumer_timeout was hit, not the call's deadline", k)
	}
	if left := harness.ProcessesOf(recorder); len(left) != 1 {
		t.Errorf("recorder processes %v alive, want the one current plugin: a frozen one was left behind", left)
	}
	restarts, _ := p.Metric(`acemq_plugin_restarts_total{plugin="recorder"}`)
	harness.Record(t, harness.Row{Scenario: "S15 hung plugin (SIGSTOP)", Faults: fmt.Sprintf("%d× SIGSTOP of the plugin", freezes), Verdict: v,
		Recovery: fmt.Sprintf("killed %.1fs, replaced %.1fs after SIGSTOP", worstKill.Seconds(), worst.Seconds()),
		Notes: fmt.Sprintf("hung once the 2s timeout and 1s grace passed, its process group killed when go-plugin's stop had not ended within 3s; %d deliveries retried; restart counter %v; dup effects = effects a frozen plugin applied before it froze (at-least-once)",
			retried, restarts)})
}

// TestChaosS16TamperedPlugin starts the runtime with a plugin it must not
// trust, with messages waiting on the flow's queue: the recorder with one
// byte flipped (the flow's sha256 is the real binary's), a plugin whose
// handshake carries the wrong magic cookie, and one that speaks another
// protocol version. Each time the runtime refuses to start, naming the
// checksum or the handshake, and consumes nothing: every message stays
// queued, and the real plugin then handles all of them (lost = 0).
func TestChaosS16TamperedPlugin(t *testing.T) {
	shortIfNamed(t)
	r := newRig(t, true)
	good, err := os.ReadFile(recorder)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(good)
	// The topology first, declared by a runtime that starts, then stops.
	p := r.start(t)
	p.Signal(syscall.SIGTERM)
	if _, ok := p.Wait(30 * time.Second); !ok {
		t.Fatal("the runtime did not stop within 30s of SIGTERM")
	}
	n := size(200, 2000)
	if err := r.gen.Publish(0, plain("s16", n)...); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tampered := filepath.Join(dir, "recorder-tampered")
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x01
	if err := os.WriteFile(tampered, flipped, 0o755); err != nil {
		t.Fatal(err)
	}
	script := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := []struct {
		name, command, sha, want string
	}{
		{"one byte of the binary flipped", tampered, hex.EncodeToString(sum[:]), "sha256"},
		{"the wrong magic cookie", script("wrong-cookie", "ACEMQ_FLOW_PLUGIN=not-the-cookie exec "+recorder+` "$@"`), "", "handshake"},
		// A handshake line of protocol version 99: core version 1, then the
		// application's.
		{"another protocol version", script("wrong-version", "echo '1|99|unix|"+filepath.Join(dir, "none.sock")+"|grpc|'; sleep 60"), "", "version"},
	}
	good0, err := os.ReadFile(r.flow)
	if err != nil {
		t.Fatal(err)
	}
	var refusals []string
	for _, tc := range cases {
		flow := strings.Replace(string(good0), `command: "`+recorder+`"`, `command: "`+tc.command+`"`, 1)
		if tc.sha != "" {
			flow = strings.Replace(flow, "    timeout: 5s\n", "    timeout: 5s\n    sha256: "+tc.sha+"\n", 1)
		}
		path := filepath.Join(dir, "flow.yaml")
		if err := os.WriteFile(path, []byte(flow), 0o644); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		out, err := harness.RunOnce(binary, 2*time.Minute, "run", "--amqp", r.s.AMQP, "--admin", harness.FreeAddr(t), "--management", "off",
			"--store", r.store, "--create-schema", path)
		took := time.Since(began)
		switch {
		case err == nil:
			t.Errorf("%s: the runtime ran and exited 0, want a refusal; output:\n%s", tc.name, harness.Tail(out, 20))
		case took > time.Minute:
			t.Errorf("%s: the runtime took %s to refuse, want it at start (its output:\n%s)", tc.name, took, harness.Tail(out, 20))
		case !strings.Contains(strings.ToLower(out), tc.want):
			t.Errorf("%s: the runtime refused without naming the %s; output:\n%s", tc.name, tc.want, harness.Tail(out, 20))
		}
		if left := processesNaming(dir); len(left) > 0 {
			t.Errorf("%s: processes %v of the refused plugin still run", tc.name, left)
		}
		if ready, consumers := queueDepth(t, r.s.AMQP, "work.a"); ready != n || consumers != 0 {
			t.Errorf("%s: work.a holds %d messages ready with %d consumers after the refusal, want all %d still queued, none consumed", tc.name, ready, consumers, n)
		}
		line := lastErrorLine(out)
		t.Logf("%s: refused in %s: %s", tc.name, took.Round(time.Millisecond), line)
		refusals = append(refusals, fmt.Sprintf("%s in %.1fs", tc.name, took.Seconds()))
	}
	if len(r.replies.Outcomes()) != 0 {
		t.Errorf("%d runs replied while only refused plugins were configured, want 0", r.replies.Len())
	}
	r.start(t)
	v, _, _ := r.finish(t, 2*time.Minute)
	harness.Record(t, harness.Row{Scenario: "S16 tampered/mismatched plugin", Faults: fmt.Sprintf("%d refused plugins, %d messages queued", len(cases), n), Verdict: v,
		Notes: "runtime refused to start: " + strings.Join(refusals, ", ") + "; every message stayed queued and the real plugin then did them"})
}

// lastErrorLine is the line of a refused runtime's output that says why.
func lastErrorLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.ToLower(lines[i]); strings.Contains(l, "error") || strings.Contains(l, "refus") {
			return lines[i]
		}
	}
	return lines[len(lines)-1]
}

// processesNaming lists the live processes whose command line names
// something under dir.
func processesNaming(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), dir) {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err == nil && !gone(pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// queueDepth asks the broker for queue's ready messages and consumers (a
// passive declare, which the queue itself answers: rabbitmqctl's counts of
// a quorum queue lag by its statistics interval).
func queueDepth(t *testing.T, url, queue string) (ready, consumers int) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("queue %s: %v", queue, err)
	}
	return q.Messages, q.Consumers
}
