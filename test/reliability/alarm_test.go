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

// watermark returns the arguments of set_vm_memory_high_watermark that
// give the broker back its memory watermark as `rabbitmqctl environment`
// shows it now: a fraction ({vm_memory_high_watermark,0.4}) or an
// absolute limit ({vm_memory_high_watermark,{absolute,"1024MiB"}}). The
// broker's default, 0.4, when it shows neither.
func watermark(t *testing.T) []string {
	t.Helper()
	env := strings.Join(strings.Fields(harness.Rabbitmqctl(t, "environment")), "")
	_, rest, ok := strings.Cut(env, "{vm_memory_high_watermark,")
	if !ok {
		return []string{"0.4"}
	}
	if abs, ok := strings.CutPrefix(rest, "{absolute,"); ok {
		v, _, _ := strings.Cut(abs, "}")
		return []string{"absolute", strings.Trim(v, `"'`)}
	}
	v, _, _ := strings.Cut(rest, "}")
	if v == "" {
		return []string{"0.4"}
	}
	return []string{v}
}

// raiseMemoryAlarm sets the broker's memory watermark to one byte, so that
// its memory alarm goes off and it blocks every publishing connection, and
// returns the function that restores the watermark it had; t.Cleanup
// restores it too, whatever the test does. The alarm blocks every client
// of the shared broker: run the scenario when nothing else uses it.
func raiseMemoryAlarm(t *testing.T) (restore func()) {
	t.Helper()
	prev := watermark(t)
	done := false
	restore = func() {
		if done {
			return
		}
		if out, err := harness.RabbitmqctlErr(append([]string{"set_vm_memory_high_watermark"}, prev...)...); err != nil {
			t.Errorf("restore the memory watermark %v: %v: %s; run rabbitmqctl set_vm_memory_high_watermark %s by hand", prev, err, out, strings.Join(prev, " "))
			return
		}
		done = true
		t.Logf("memory watermark restored to %s", strings.Join(prev, " "))
	}
	t.Cleanup(restore)
	harness.Rabbitmqctl(t, "set_vm_memory_high_watermark", "absolute", "1")
	t.Logf("memory watermark set to 1 byte (it was %s)", strings.Join(prev, " "))
	return restore
}

// TestChaosS8MemoryAlarm raises the broker's memory alarm under load:
// the broker blocks the runtime's publishing connection, /readyz turns
// 503 saying which connection is blocked and since when, /v1/status shows
// it blocked, the log says so once; once the alarm clears /readyz is 200
// again, the log says unblocked, and nothing is lost.
func TestChaosS8MemoryAlarm(t *testing.T) {
	notStar(t)
	r := newRig(t, true)
	p := r.start(t)
	wait := publishInBackground(t, r, plain("s8", load(10, 4000)))
	r.replies.WaitCount(50, time.Minute)
	if _, code, err := p.Get("/readyz"); err != nil || code != 200 {
		t.Fatalf("/readyz before the alarm = %d, %v; want 200", code, err)
	}
	restore := raiseMemoryAlarm(t)
	raised := time.Now()
	var unready time.Duration
	var why string
	for end := raised.Add(30 * time.Second); time.Now().Before(end); {
		body, code, err := p.Get("/readyz")
		if err == nil && code == 503 && strings.Contains(body, "blocked by the broker") {
			unready, why = time.Since(raised), body
			break
		}
		time.Sleep(100 * time.Millisecond) // /readyz is polled; it has no event
	}
	if unready == 0 {
		restore()
		t.Fatalf("/readyz did not say blocked within 30s of the memory alarm; log:\n%s", harness.Tail(p.Log(), 30))
	}
	t.Logf("not ready %.1fs into the alarm: %s", unready.Seconds(), strings.TrimSpace(why))
	status, code, err := p.Get("/v1/status")
	if err != nil || code != 200 || !strings.Contains(status, `"blocked": true`) || !strings.Contains(status, `"blocked_since"`) || !strings.Contains(status, `"ready": false`) {
		t.Errorf("/v1/status during the alarm = %d, %v:\n%s\nwant a connection blocked with since when, and not ready", code, err, status)
	}
	if !p.WaitLog(`msg="connection blocked by the broker`, 10*time.Second) {
		t.Errorf("the log never said that the broker blocked a connection; log:\n%s", harness.Tail(p.Log(), 30))
	}
	// Held for a while, shorter than the 30s after which a connection the
	// broker reads nothing from is redialled: /readyz stays 503 throughout.
	hold := time.Duration(size(8, 20)) * time.Second
	readyDuring := 0
	for end := time.Now().Add(hold); time.Now().Before(end); {
		if _, code, err := p.Get("/readyz"); err == nil && code == 200 {
			readyDuring++
		}
		time.Sleep(200 * time.Millisecond) // as above
	}
	if readyDuring > 0 {
		t.Errorf("/readyz answered 200 %d times while the memory alarm held", readyDuring)
	}
	restore()
	cleared := time.Now()
	var ready time.Duration
	for end := cleared.Add(30 * time.Second); time.Now().Before(end); {
		if _, code, err := p.Get("/readyz"); err == nil && code == 200 {
			ready = time.Since(cleared)
			break
		}
		time.Sleep(50 * time.Millisecond) // as above
	}
	if ready == 0 {
		body, code, _ := p.Get("/readyz")
		t.Errorf("/readyz was not ready 30s after the alarm cleared: %d %s; log:\n%s", code, body, harness.Tail(p.Log(), 30))
	}
	if !p.WaitLog(`msg="connection unblocked by the broker"`, 10*time.Second) {
		t.Errorf("the log never said that the broker unblocked the connection; log:\n%s", harness.Tail(p.Log(), 30))
	}
	if status, _, _ := p.Get("/v1/status"); strings.Contains(status, `"blocked": true`) {
		t.Errorf("/v1/status after the alarm still shows a connection blocked:\n%s", status)
	}
	// Once per change: every "blocked" has its one "unblocked" (or "no
	// longer blocked", when the connection was lost while blocked).
	blocked := p.Count(`msg="connection blocked by the broker`)
	unblocked := p.Count(`msg="connection unblocked by the broker"`) + p.Count(`msg="connection no longer blocked`)
	if blocked == 0 || blocked != unblocked {
		t.Errorf("the log said blocked %d times and unblocked %d times, want once each per connection the broker blocked", blocked, unblocked)
	}
	wait()
	v, _, _ := r.finish(t, 2*time.Minute)
	harness.Record(t, harness.Row{Scenario: "S8 broker memory alarm", Faults: fmt.Sprintf("vm_memory_high_watermark 1 byte for %.0fs", cleared.Sub(raised).Seconds()), Verdict: v,
		Recovery: fmt.Sprintf("ready %.1fs after the alarm cleared", ready.Seconds()),
		Notes:    fmt.Sprintf("/readyz 503 %.1fs into the alarm, naming the blocked connection; %d connection(s) blocked and unblocked, each logged once", unready.Seconds(), blocked)})
}

// runtimeConnections counts the connections of the runtime in vhost that
// the broker still holds.
func runtimeConnections(t *testing.T, vhost string) int {
	t.Helper()
	out := harness.Rabbitmqctl(t, "list_connections", "-q", "--no-table-headers", "vhost", "client_properties")
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == vhost && strings.Contains(line, `"connection_name","acemq-flow`) {
			n++
		}
	}
	return n
}

// TestChaosS6bFreezeLongerThanHeartbeat stops the runtime (SIGSTOP) with a
// 2s heartbeat until the broker has dropped its connections, then lets it
// run again (SIGCONT) and asks /readyz at once, again and again: it must
// not answer 200 before the runtime has redialled both connections, which
// it would if it trusted what it knew before the freeze. Nothing is lost.
func TestChaosS6bFreezeLongerThanHeartbeat(t *testing.T) {
	r := newRig(t, true)
	sep := "?"
	if strings.Contains(r.s.AMQP, "?") {
		sep = "&"
	}
	p := harness.StartRuntime(t, binary, r.s.AMQP+sep+"heartbeat=2", "--store", r.store, "--create-schema", "--claim-timeout", "5s", r.flow)
	wait := publishInBackground(t, r, plain("s6b", load(10, 3000)))
	r.replies.WaitCount(50, time.Minute)
	if n := runtimeConnections(t, r.s.VHost); n != 2 {
		t.Fatalf("the broker shows %d connections of the runtime in %s, want 2", n, r.s.VHost)
	}
	before, err := p.Metric("acemq_broker_reconnects_total")
	if err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			p.Signal(syscall.SIGCONT)
			resumed = true
		}
	}
	t.Cleanup(resume)
	// The broker drops a client it has not heard from for two to three
	// heartbeats; its connection list is what says it did.
	for runtimeConnections(t, r.s.VHost) > 0 {
		if time.Since(stopped) > 30*time.Second {
			resume()
			t.Fatal("the broker still holds the runtime's connections 30s into a freeze with a 2s heartbeat")
		}
		time.Sleep(200 * time.Millisecond) // the broker's connection list has no event
	}
	frozen := time.Since(stopped)
	resume()
	continued := time.Now()
	var answers []string
	var ready time.Duration
	for time.Since(continued) < time.Minute {
		body, code, err := p.Get("/readyz")
		if err != nil {
			if len(answers) < 10 {
				answers = append(answers, err.Error())
			}
			continue
		}
		if code == 200 {
			ready = time.Since(continued)
			// Ready must mean redialled: both connections the broker
			// dropped are new ones.
			after, err := p.Metric("acemq_broker_reconnects_total")
			if err != nil || after < before+2 {
				t.Errorf("/readyz answered 200 %.2fs after SIGCONT with %v reconnects since the freeze (%v), want both connections redialled first; answers before: %q",
					ready.Seconds(), after-before, err, answers)
			}
			break
		}
		if len(answers) < 10 {
			answers = append(answers, fmt.Sprintf("%d %s", code, strings.TrimSpace(body)))
		}
		time.Sleep(20 * time.Millisecond) // /readyz is polled; it has no event
	}
	if ready == 0 {
		t.Fatalf("/readyz was not ready a minute after SIGCONT; answers %q; log:\n%s", answers, harness.Tail(p.Log(), 30))
	}
	t.Logf("frozen %.1fs; ready %.2fs after SIGCONT; answers before: %q", frozen.Seconds(), ready.Seconds(), answers)
	if n := runtimeConnections(t, r.s.VHost); n != 2 {
		t.Errorf("the broker shows %d connections of the runtime once it is ready again, want 2", n)
	}
	wait()
	v, _, _ := r.finish(t, 2*time.Minute)
	harness.Record(t, harness.Row{Scenario: "S6b freeze longer than the heartbeat", Faults: fmt.Sprintf("SIGSTOP %.0fs, heartbeat 2s, then SIGCONT", frozen.Seconds()), Verdict: v,
		Recovery: fmt.Sprintf("ready %.1fs after SIGCONT", ready.Seconds()),
		Notes:    "/readyz never ready before both connections were redialled"})
}
