package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/test/testenv"
)

const ladderFlow = `version: acemq.flow/v1
name: e2e
defaults:
  retry: {max_attempts: 3, initial_delay: 200ms, max_delay: 1s, jitter: 0}
plugins:
  testkit: {command: TESTKIT}
pipelines:
  - name: flaky
    steps:
      - {name: try, handler: testkit.flaky, retry: {max_attempts: 5}}
  - name: doomed
    steps:
      - {name: fail, handler: testkit.fail}
      - {name: fatal, handler: testkit.fatal}
consumers:
  - {id: good, queue: good.q, handler: testkit.echo, declare: {type: quorum}}
`

// getOne waits for one message on queue (basic.get until one comes).
func getOne(t *testing.T, ch *amqp.Channel, queue string, d time.Duration) amqp.Delivery {
	t.Helper()
	var got amqp.Delivery
	testenv.Eventually(t, d, func() error {
		m, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return testenv.Errorf("%s is empty", queue)
		}
		got = m
		return nil
	})
	return got
}

func TestFlakyRetriesWithoutBlockingTheChannel(t *testing.T) {
	url := testenv.VHost(t)
	p := startRuntime(t, url, writeFlow(t, ladderFlow))
	ch := dial(t, url)
	res := consumeResults(t, ch, "results")
	pub := dial(t, url)
	slow := publishN(t, pub, "flaky", "try", "results", 1, `{"fail_attempts": 3}`)
	fast := publishN(t, pub, "flaky", "try", "results", 1, `{"fail_attempts": 0}`)
	var order []string
	for len(order) < 2 {
		select {
		case m := <-res.ch:
			order = append(order, m.CorrelationId)
			if o := fmt.Sprint(m.Headers["x-acemq-outcome"]); o != "completed" {
				t.Errorf("run %s ended %s, want completed", m.CorrelationId, o)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of 2 runs completed; log:\n%s", len(order), tail(p.output(), 30))
		}
	}
	if order[0] != fast[0] || order[1] != slow[0] {
		t.Errorf("completion order %v, want the fast message %s first: the failing one must not hold the channel", order, fast[0])
	}
	for attempt := 1; attempt <= 3; attempt++ {
		if !strings.Contains(p.output(), fmt.Sprintf(`msg="delivery retried" flow=e2e consumer=flaky.try queue=flaky.try message_id=%s attempt=%d`, slow[0], attempt)) {
			t.Errorf("no retry of attempt %d logged for %s", attempt, slow[0])
		}
	}
	if strings.Contains(p.output(), fmt.Sprintf("message_id=%s attempt=4 rung", slow[0])) {
		t.Errorf("attempt 4 was retried; it should have succeeded")
	}
}

func TestFailEndsInTheDLQAfterMaxAttemptsAndFatalAtOnce(t *testing.T) {
	url := testenv.VHost(t)
	startRuntime(t, url, writeFlow(t, ladderFlow))
	ch := dial(t, url)
	ids := publishN(t, dial(t, url), "doomed", "fail", "", 1, `{"order":"o-1"}`)
	m := getOne(t, ch, "doomed.fail.dlq", 30*time.Second)
	want := map[string]string{
		"x-acemq-error-kind":   "exhausted",
		"x-acemq-failed-queue": "doomed.fail",
		"x-acemq-attempt":      "3",
	}
	for k, v := range want {
		if got := fmt.Sprint(m.Headers[k]); got != v {
			t.Errorf("dead-lettered header %s = %s, want %s", k, got, v)
		}
	}
	if !strings.Contains(fmt.Sprint(m.Headers["x-acemq-error"]), "testkit: fail on attempt 3") {
		t.Errorf("x-acemq-error = %v, want the handler's last failure", m.Headers["x-acemq-error"])
	}
	if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m.Headers["x-acemq-failed-at"])); err != nil {
		t.Errorf("x-acemq-failed-at = %v, not an RFC 3339 time", m.Headers["x-acemq-failed-at"])
	}
	if m.MessageId != ids[0] || string(m.Body) != `{"order":"o-1"}` {
		t.Errorf("the dead-lettered message is %s %s, want the original %s", m.MessageId, m.Body, ids[0])
	}

	publishN(t, dial(t, url), "doomed", "fatal", "", 1, `{"order":"o-2"}`)
	f := getOne(t, ch, "doomed.fatal.dlq", 30*time.Second)
	if fmt.Sprint(f.Headers["x-acemq-error-kind"]) != "fatal" || fmt.Sprint(f.Headers["x-acemq-attempt"]) != "1" {
		t.Errorf("a fatal failure: kind %v attempt %v, want fatal on attempt 1", f.Headers["x-acemq-error-kind"], f.Headers["x-acemq-attempt"])
	}
}

func TestReplayBringsAMessageBackAndOverReplayedOnesArePark(t *testing.T) {
	url := testenv.VHost(t)
	startRuntime(t, url, writeFlow(t, ladderFlow))
	ch := dial(t, url)
	res := consumeResults(t, ch, "results")
	ids := publishN(t, dial(t, url), "doomed", "fatal", "results", 1, `{"order":"o-3"}`)
	// The requester hears the run was dead-lettered.
	res.atLeast(t, 1, 30*time.Second)
	if o := res.seen[ids[0]]; o != "dead-lettered" {
		t.Fatalf("the reply says %q, want dead-lettered", o)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		q, err := ch.QueueDeclarePassive("doomed.fatal.dlq", true, false, false, false, nil)
		if err != nil || q.Messages != 1 {
			return testenv.Errorf("doomed.fatal.dlq holds %d, want 1", q.Messages)
		}
		return nil
	})
	// Replayed to a queue whose consumer succeeds, the run completes.
	out, errOut, code := cli(t, "replay", "doomed.fatal.dlq", "--amqp", url, "--to", "good.q")
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
	}
	select {
	case m := <-res.ch:
		if m.CorrelationId != ids[0] || fmt.Sprint(m.Headers["x-acemq-outcome"]) != "completed" {
			t.Errorf("after replay the reply is %s %v, want %s completed", m.CorrelationId, m.Headers["x-acemq-outcome"], ids[0])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the replayed message never completed")
	}

	// Replayed back to the failing step more often than allowed, it parks.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pubCh := dial(t, url)
	if err := pubCh.PublishWithContext(ctx, "doomed", "fatal", true, false, amqp.Publishing{MessageId: "m-park", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	getOneKeep := func(queue string) {
		testenv.Eventually(t, 30*time.Second, func() error {
			q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			if err != nil || q.Messages < 1 {
				return testenv.Errorf("%s holds %d", queue, q.Messages)
			}
			return nil
		})
	}
	getOneKeep("doomed.fatal.dlq")
	if _, errOut, code := cli(t, "replay", "doomed.fatal.dlq", "--amqp", url, "--max-replays", "1"); code != 0 {
		t.Fatalf("first replay: exit %d: %s", code, errOut)
	}
	getOneKeep("doomed.fatal.dlq")
	if _, errOut, code := cli(t, "replay", "doomed.fatal.dlq", "--amqp", url, "--max-replays", "1"); code != 0 {
		t.Fatalf("second replay: exit %d: %s", code, errOut)
	}
	parked := getOne(t, ch, "doomed.fatal.parked", 30*time.Second)
	if parked.MessageId != "m-park" || fmt.Sprint(parked.Headers["x-acemq-replays"]) != "1" {
		t.Errorf("parked %s with replays %v, want m-park replayed once", parked.MessageId, parked.Headers["x-acemq-replays"])
	}
}
