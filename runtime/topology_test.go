package runtime_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// deadLetterFlow is FLOW-FORMAT §1's audit.log: a queue the flow declares
// with dead_letter: true and nobody consumes. Its TTL is short so that a
// test sees a message expire.
const deadLetterFlow = `version: acemq.flow/v1
name: audit
topology:
  queues:
    - {name: audit.log, type: classic, arguments: {x-message-ttl: 200}, dead_letter: true}
`

func compileText(t *testing.T, flow string) *plan.Plan {
	t.Helper()
	set, err := spec.Load(testenv.FlowFS(flow), "f.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return pl
}

func TestDeadLetteringQueuesGetTheirDLQOnce(t *testing.T) {
	cases := []struct {
		name string
		flow string
	}{
		{"a declared queue nobody consumes gets its .dlq", deadLetterFlow},
		{"a declared queue a consumer also consumes gets its .dlq once", deadLetterFlow + `plugins:
  k: {command: ./not-started}
consumers:
  - {id: auditor, queue: audit.log, handler: k.echo}
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pl := compileText(t, tc.flow)
			var queues, bindings int
			for _, q := range pl.Queues {
				if q.Name == "audit.log.dlq" {
					queues++
					if q.Type != "classic" || q.Mode != plan.Declare || q.Purpose != "dlq" {
						t.Errorf("Compile: audit.log.dlq is %s, %s, %s; want classic, declare, dlq", q.Type, q.Mode, q.Purpose)
					}
				}
			}
			for _, b := range pl.Bindings {
				if b.Exchange == plan.DeadLetterExchange && b.Queue == "audit.log.dlq" && b.RoutingKey == "audit.log.dlq" {
					bindings++
				}
			}
			if queues != 1 || bindings != 1 {
				t.Errorf("Compile: %d audit.log.dlq queue(s) and %d acemq.dlx binding(s) to it, want 1 and 1", queues, bindings)
			}
		})
	}
}

func queueDepth(t *testing.T, ch *amqp.Channel, queue string) (int, error) {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}

// channelOn opens a channel on url for the test; a passive declare of a
// missing queue closes a channel, so each check opens its own.
func channelOn(t *testing.T, url string) func() *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func() *amqp.Channel {
		t.Helper()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ch.Close() })
		return ch
	}
}

func waitDepth(t *testing.T, channel func() *amqp.Channel, queue string, want int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		n, err := queueDepth(t, channel(), queue)
		if err != nil || n != want {
			return testenv.Errorf("queue %s holds %d message(s) (%v), want %d", queue, n, err, want)
		}
		return nil
	})
}

func TestAnExpiredMessageOfADeadLetteringQueueLandsInItsDLQ(t *testing.T) {
	url := testenv.VHost(t)
	runtimetest.Start(t, url, deadLetterFlow, runtime.Options{})
	channel := channelOn(t, url)
	if err := channel().PublishWithContext(t.Context(), "", "audit.log", true, false,
		amqp.Publishing{MessageId: "m-1", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	waitDepth(t, channel, "audit.log.dlq", 1)
	waitDepth(t, channel, "audit.log", 0)
}

func TestAStoppedStepKeepsABacklog(t *testing.T) {
	url := testenv.VHost(t)
	handled := make(chan string, 1)
	rt, _ := runtimetest.Start(t, url, `version: acemq.flow/v1
name: stopped
plugins:
  k: {command: ./not-started}
pipelines:
  - name: p
    steps:
      - {name: a, handler: k.echo}
      - {name: b, handler: k.last, auto_startup: false}
`, runtime.Options{Handlers: map[string]runtime.HandlerFunc{
		"k.echo": echo,
		"k.last": func(_ context.Context, req runtime.Request) (decide.Result, error) {
			handled <- req.Envelope.MessageID
			return decide.Result{Stop: true}, nil
		},
	}})
	channel := channelOn(t, url)
	if err := channel().PublishWithContext(t.Context(), "p", "a", true, false,
		amqp.Publishing{MessageId: "m-1", Body: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	waitDepth(t, channel, "p.b", 1)
	if n, err := queueDepth(t, channel(), "p.a.dlq"); err != nil || n != 0 {
		t.Fatalf("p.a.dlq holds %d message(s) (%v) while step b is stopped, want 0", n, err)
	}
	if err := rt.Start(t.Context(), "p.b"); err != nil {
		t.Fatalf("Start(p.b): %v", err)
	}
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("step b did not handle the backlog within 10s of being started")
	}
	waitDepth(t, channel, "p.b", 0)
}
