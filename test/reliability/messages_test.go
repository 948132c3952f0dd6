//go:build chaos

package reliability

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// management calls the broker's management API (the URL's user, port
// 15672) with method on path and fails the test unless it answers 2xx.
func management(t *testing.T, amqpURL, method, path, body string) {
	t.Helper()
	u, _ := url.Parse(amqpURL)
	pass, _ := u.User.Password()
	req, _ := http.NewRequest(method, "http://"+u.Hostname()+":15672"+path, strings.NewReader(body))
	req.SetBasicAuth(u.User.Username(), pass)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("management %s %s: %v", method, path, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("management %s %s: %s", method, path, resp.Status)
	}
}

// TestChaosS9TopologyErrors removes, under load, the binding that routes
// step a's results to step b, then puts it back; then deletes the
// pipeline's exchange and feeds step a's queue directly. Results that
// cannot be routed, and results whose exchange is gone, are dead-lettered
// with the reason, the publishing channel closed by the 404 is reopened,
// and nothing is dropped silently.
func TestChaosS9TopologyErrors(t *testing.T) {
	r := newRig(t, true)
	p := r.start(t)
	vh := url.PathEscape(r.s.VHost)
	wait := publishInBackground(t, r, plain("s9", load(3, 3000)))
	r.replies.WaitCount(50, time.Minute)
	management(t, r.s.AMQP, http.MethodDelete, "/api/bindings/"+vh+"/e/work/q/work.b/b", "")
	time.Sleep(time.Second) // the outage's length
	management(t, r.s.AMQP, http.MethodPost, "/api/bindings/"+vh+"/e/work/q/work.b", `{"routing_key":"b"}`)
	wait()
	if left := harness.Drain(t, r.replies, r.s.VHost, replyQueue, r.gen.Sent.IDs(harness.OK), time.Minute); left != "" {
		t.Errorf("before the exchange is deleted, not drained: %s", left)
	}

	// The exchange gone: step a's queue fed through the default exchange.
	management(t, r.s.AMQP, http.MethodDelete, "/api/exchanges/"+vh+"/work", "")
	reopened := p.Count(`msg="publishing channel reopened"`)
	gone := harness.Messages("s9-noexchange-"+harness.Random(3), "", "work.a", `{"k":1}`, 5)
	if err := r.gen.Publish(0, gone...); err != nil {
		t.Fatal(err)
	}
	v, dead, _ := r.finish(t, time.Minute)
	reasons := map[string]int{}
	for _, d := range dead {
		switch {
		case strings.Contains(d.Error, "could not be routed") || strings.Contains(d.Error, "NO_ROUTE"):
			reasons["unroutable"]++
		case strings.Contains(d.Error, "exchange") && (strings.Contains(d.Error, "not exist") || strings.Contains(d.Error, "404") || strings.Contains(d.Error, "NOT_FOUND")):
			reasons["exchange missing"]++
		default:
			reasons["other"]++
			t.Logf("dead letter %s in %s: %s", d.Run, d.Queue, d.Error)
		}
	}
	for _, m := range gone {
		found := false
		for _, d := range dead {
			found = found || d.Run == m.ID
		}
		if !found {
			t.Errorf("run %s, whose result's exchange was deleted, is not in a .dlq", m.ID)
		}
	}
	if reasons["other"] > 0 {
		t.Errorf("%d dead letters for a reason neither a missing route nor a missing exchange", reasons["other"])
	}
	if reasons["exchange missing"] < len(gone) {
		t.Errorf("dead letters by reason %v, want %d naming the missing exchange", reasons, len(gone))
	}
	if p.Count(`msg="publishing channel reopened"`) <= reopened && !strings.Contains(p.Log(), "channel") {
		t.Errorf("no publishing channel reopened after the 404; log:\n%s", harness.Tail(p.Log(), 30))
	}
	harness.Record(t, harness.Row{Scenario: "S9 topology errors", Faults: "binding a→b deleted 1s; exchange deleted", Verdict: v,
		Notes: fmt.Sprintf("dead letters by reason %v; dup effects = step a redone after its result's publish failed on the channel the 404 closed (at-least-once)", reasons)})
}

// TestChaosS17Poison sends messages whose handler fails on every attempt
// beside ordinary ones: each is tried exactly max_attempts (3) times, each
// retry waits at least its rung's delay (200ms, 400ms), and it ends in the
// step's .dlq, kind exhausted, never dropped by a dead-letter cycle; the
// quorum queue's x-delivery-limit is set explicitly.
func TestChaosS17Poison(t *testing.T) {
	r := newRig(t, true)
	r.start(t)
	poison := harness.Messages("s17-poison-"+harness.Random(3), "work", "a", `{"fail":true}`, 5)
	msgs := append(plain("s17", load(2, 1000)), poison...)
	if err := r.gen.Publish(rate(), msgs...); err != nil {
		t.Fatal(err)
	}
	v, dead, _ := r.finish(t, time.Minute)
	var rungs [2][]time.Duration
	for _, m := range poison {
		calls := r.ledger.Calls(t, m.ID)
		var attempts []int
		for _, c := range calls {
			if c.Step != "work.a" {
				t.Errorf("poison run %s reached step %s", m.ID, c.Step)
			}
			attempts = append(attempts, c.Attempt)
			if c.N != 1 {
				t.Errorf("poison run %s: attempt %d seen %d times, want once", m.ID, c.Attempt, c.N)
			}
		}
		if fmt.Sprint(attempts) != "[1 2 3]" {
			t.Errorf("poison run %s was tried on attempts %v, want [1 2 3]", m.ID, attempts)
			continue
		}
		for i := range 2 {
			gap := time.Duration(calls[i+1].AtMS-calls[i].AtMS) * time.Millisecond
			rungs[i] = append(rungs[i], gap)
			if want := time.Duration(200<<i) * time.Millisecond; gap < want*9/10 {
				t.Errorf("poison run %s: retry %d came %s after the try before, sooner than its rung's %s", m.ID, i+1, gap, want)
			}
		}
		var d *harness.DeadLetter
		for i := range dead {
			if dead[i].Run == m.ID {
				d = &dead[i]
			}
		}
		switch {
		case d == nil:
			t.Errorf("poison run %s is in no .dlq", m.ID)
		case d.Queue != "work.a.dlq" || d.Kind != "exhausted":
			t.Errorf("poison run %s is in %s with kind %s, want work.a.dlq, exhausted", m.ID, d.Queue, d.Kind)
		}
	}
	limit := ""
	for _, q := range harness.Queues(t, r.s.VHost) {
		if q.Name == "work.a" {
			limit = q.Arguments
		}
	}
	if !strings.Contains(limit, "x-delivery-limit") {
		t.Errorf("work.a's arguments %q have no explicit x-delivery-limit", limit)
	}
	harness.Record(t, harness.Row{Scenario: "S17 poison", Faults: fmt.Sprintf("%d poison among %d", len(poison), len(msgs)), Verdict: v,
		Notes: fmt.Sprintf("3 attempts each; rung 200ms measured %s, rung 400ms measured %s; ends in work.a.dlq (exhausted)", spread(rungs[0]), spread(rungs[1]))})
}

func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return fmt.Sprintf("%s–%s", ds[0].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
}

// TestChaosS18Unparseable sends what can never succeed: a payload that is
// not valid for the pipeline's type, bytes that are not JSON, and a
// routing slip that cannot be parsed. Each goes straight to the step's
// .dlq, fatal, on its first attempt, without calling the handler and
// without a trip through the ladder.
func TestChaosS18Unparseable(t *testing.T) {
	r := newRig(t, true)
	p := r.start(t)
	tag := harness.Random(3)
	bad := []harness.Message{
		{ID: "s18-invalid-" + tag, Exchange: "typed", Key: "a", Body: `{"id": 5}`},
		{ID: "s18-garbage-" + tag, Exchange: "typed", Key: "a", Body: "\x00\xffnot json{{"},
		{ID: "s18-slip-" + tag, Exchange: "work", Key: "a", Body: `{"k":1}`, Headers: amqp.Table{"acemq-routing-slip": "{not a slip"}},
	}
	msgs := append(plain("s18", size(100, 500)), bad...)
	if err := r.gen.Publish(0, msgs...); err != nil {
		t.Fatal(err)
	}
	v, dead, _ := r.finish(t, time.Minute)
	for _, m := range bad {
		var d *harness.DeadLetter
		for i := range dead {
			if dead[i].Run == m.ID {
				d = &dead[i]
			}
		}
		if d == nil {
			t.Errorf("%s is in no .dlq", m.ID)
			continue
		}
		if d.Kind != "fatal" || d.Attempt > 1 {
			t.Errorf("%s is in %s with kind %s on attempt %d, want fatal on the first", m.ID, d.Queue, d.Kind, d.Attempt)
		}
		if calls := r.ledger.Calls(t, m.ID); len(calls) != 0 {
			t.Errorf("%s reached the handler %d times, want never", m.ID, len(calls))
		}
		if n := p.Count(`msg="delivery retried"` + " "); n > 0 && strings.Contains(p.Log(), "message_id="+m.ID) && retriedID(p.Log(), m.ID) {
			t.Errorf("%s went through the retry ladder", m.ID)
		}
	}
	harness.Record(t, harness.Row{Scenario: "S18 unparseable", Faults: "schema-invalid payload, non-JSON bytes, unparseable slip", Verdict: v,
		Notes: "each in its step's .dlq, fatal, first attempt, handler never called, no ladder trip"})
}

func retriedID(log, id string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="delivery retried"`) && strings.Contains(l, id) {
			return true
		}
	}
	return false
}

// TestChaosS19DuplicateStorm publishes every message id three times (at
// 0, +500ms and +550ms) to two runtimes consuming the same queues on one
// PostgreSQL store: each step's effect happens once per run, and the
// other deliveries are acknowledged as duplicates (MassTransit's inbox
// lock test).
func TestChaosS19DuplicateStorm(t *testing.T) {
	r := newRig(t, true)
	p1 := r.start(t)
	p2 := r.start(t)
	msgs := plain("s19", size(100, 500))
	for _, pause := range []time.Duration{0, 500 * time.Millisecond, 50 * time.Millisecond} {
		time.Sleep(pause) // the storm's shape: copies 500ms then 50ms apart
		if err := r.gen.Publish(0, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	v, _, _ := r.finish(t, time.Minute)
	twice := 0
	for run, steps := range r.ledger.Effects(t) {
		for step, n := range steps {
			if n != 1 {
				twice++
				if twice <= 5 {
					t.Errorf("run %s: the effect at %s happened %d times, want once", run, step, n)
				}
			}
		}
	}
	dups := p1.Count("outcome=duplicate") + p2.Count("outcome=duplicate")
	if dups == 0 && r.replies.Duplicates() == 0 {
		t.Log("no delivery was logged as a duplicate at info level; the effect count is the verdict")
	}
	harness.Record(t, harness.Row{Scenario: "S19 duplicate storm", Faults: fmt.Sprintf("%d ids × 3 copies, 2 runtimes", len(msgs)), Verdict: v,
		Notes: fmt.Sprintf("%d effects applied more than once; %d duplicate replies", twice, r.replies.Duplicates())})
}
