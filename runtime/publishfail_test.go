package runtime_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/test/testenv"
)

const publishFailFlow = `version: acemq.flow/v1
name: pf
plugins:
  k: {command: ./not-started}
pipelines:
  - name: p
    steps:
      - {name: a, handler: k.echo, queue_type: classic}
      - {name: b, handler: k.echo, queue_type: classic}
`

// TestResultToAMissingExchangeIsDeadLettered sends a message whose slip's
// next stop names an exchange that does not exist: the broker closes the
// publishing channel (404). The message must be dead-lettered once, with
// the reason, not requeued and handled again and again (on a classic queue,
// thousands of times a second, for ever).
func TestResultToAMissingExchangeIsDeadLettered(t *testing.T) {
	url := testenv.VHost(t)
	calls := startEchoCounting(t, url, publishFailFlow)
	ch := channelOn(t, url)()
	slip := `{"steps":[{"exchange":"","routingKey":"p.a","name":"a"},{"exchange":"no-such-exchange","routingKey":"k","name":"b"}],"done":[]}`
	if err := ch.PublishWithContext(t.Context(), "", "p.a", false, false, amqp.Publishing{MessageId: "m-1", ContentType: "application/json",
		Headers: amqp.Table{runtime.HeaderSlip: slip}, Body: []byte(`{"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	dl := deadLettered(t, ch, "p.a.dlq", calls)
	if reason, _ := dl.Headers[runtime.HeaderError].(string); !strings.Contains(reason, "could not be routed") || !strings.Contains(reason, "no-such-exchange") {
		t.Errorf("dead-lettered with reason %q, want one saying the result could not be routed to no-such-exchange", reason)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
}

const nackFlow = `version: acemq.flow/v1
name: nk
plugins:
  k: {command: ./not-started}
pipelines:
  - name: p
    steps:
      - {name: a, handler: k.echo, queue_type: classic, retry: {max_attempts: 2, initial_delay: 1s, max_delay: 1s, jitter: 0}}
      - {name: b, handler: k.echo, queue_type: classic, auto_startup: false}
`

// TestResultRefusedByTheBrokerGoesRoundTheRetryLadder fills step b's queue
// (a policy: at most one message, then reject-publish), so the broker nacks
// step a's second result. That message must go round a's retry ladder, and
// after its last attempt to a's dead letters with the reason: not be
// requeued and handled again at once, for ever.
func TestResultRefusedByTheBrokerGoesRoundTheRetryLadder(t *testing.T) {
	url := testenv.VHost(t)
	testenv.Rabbitmqctl(t, "set_policy", "-p", testenv.VHostOf(url), "--apply-to", "queues", "full-b", `^p\.b$`,
		`{"max-length":1,"overflow":"reject-publish"}`)
	calls := startEchoCounting(t, url, nackFlow)
	ch := channelOn(t, url)()
	for _, id := range []string{"m-1", "m-2"} {
		if err := ch.PublishWithContext(t.Context(), "", "p.a", false, false, amqp.Publishing{MessageId: id, ContentType: "application/json",
			Body: []byte(`{"id":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	dl := deadLettered(t, ch, "p.a.dlq", calls)
	if reason, _ := dl.Headers[runtime.HeaderError].(string); !strings.Contains(reason, "refused by the broker") {
		t.Errorf("dead-lettered with reason %q, want one saying the broker refused the result", reason)
	}
	if attempt, _ := dl.Headers[runtime.HeaderAttempt].(int64); attempt != 2 {
		t.Errorf("dead-lettered at attempt %v, want 2 (headers %v)", dl.Headers[runtime.HeaderAttempt], dl.Headers)
	}
	// One result reached b; the other message was handled once per attempt.
	if q, err := ch.QueueDeclarePassive("p.b", true, false, false, false, nil); err != nil || q.Messages != 1 {
		t.Errorf("p.b holds %d messages (%v), want 1", q.Messages, err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the handler ran %d times, want 3 (once for the message that reached b, twice for the refused one)", n)
	}
}

// startEchoCounting runs flow with k.echo in process, counting its calls.
func startEchoCounting(t *testing.T, url, flow string) *atomic.Int64 {
	t.Helper()
	var calls atomic.Int64
	handler := func(_ context.Context, req runtime.Request) (runtime.Result, error) {
		calls.Add(1)
		return runtime.Result{Payload: req.Payload}, nil
	}
	startInProcess(t, url, flow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{"k.echo": handler}})
	return &calls
}

// deadLettered waits for the first message in queue and takes it.
func deadLettered(t *testing.T, ch *amqp.Channel, queue string, calls *atomic.Int64) amqp.Delivery {
	t.Helper()
	var dl amqp.Delivery
	testenv.Eventually(t, 30*time.Second, func() error {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			return err
		}
		if !ok {
			return testenv.Errorf("nothing in %s yet (the handler ran %d times)", queue, calls.Load())
		}
		dl = d
		return nil
	})
	return dl
}
