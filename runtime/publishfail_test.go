package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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
		Headers: amqp.Table{plan.HeaderSlip: slip}, Body: []byte(`{"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	dl := deadLettered(t, ch, "p.a.dlq", calls)
	if reason, _ := dl.Headers[plan.HeaderError].(string); !strings.Contains(reason, `exchange "no-such-exchange"`) || !strings.Contains(reason, "does not exist") {
		t.Errorf("dead-lettered with reason %q, want one saying exchange no-such-exchange does not exist", reason)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
}

// TestAnExchangeDeletedAfterItsCheckDeadLettersOnlyItsMessage: an
// exchange a slip names is found to exist, and the answer kept; deleted
// meanwhile, the next publish to it makes the broker close the channel
// (404). That message is dead-lettered naming the exchange, once the
// broker, asked again, says it is gone. The answer is trusted for the
// whole test, so that the second message is published, not stopped by the
// check: were the 404 not read, it would go back to its queue, be
// published again on the trusted answer, and never reach .dlq.
func TestAnExchangeDeletedAfterItsCheckDeadLettersOnlyItsMessage(t *testing.T) {
	runtime.SetExchangeTrust(t, time.Hour)
	url := testenv.VHost(t)
	calls := startEchoCounting(t, url, publishFailFlow)
	ch := channelOn(t, url)()
	if err := ch.ExchangeDeclare("ex-x", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("x-in", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("x-in", "k", "ex-x", false, nil); err != nil {
		t.Fatal(err)
	}
	slip := `{"steps":[{"exchange":"","routingKey":"p.a","name":"a"},{"exchange":"ex-x","routingKey":"k","name":"x"}],"done":[]}`
	send := func(id string) {
		t.Helper()
		if err := ch.PublishWithContext(t.Context(), "", "p.a", false, false, amqp.Publishing{MessageId: id, ContentType: "application/json",
			Headers: amqp.Table{plan.HeaderSlip: slip}, Body: []byte(`{"id":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	send("m-1")
	waitDepth(t, channelOn(t, url), "x-in", 1)
	if err := ch.ExchangeDelete("ex-x", false, false); err != nil {
		t.Fatal(err)
	}
	send("m-2")
	dl := deadLettered(t, ch, "p.a.dlq", calls)
	if reason, _ := dl.Headers[plan.HeaderError].(string); dl.MessageId != "m-2" || !strings.Contains(reason, `exchange "ex-x"`) || !strings.Contains(reason, "does not exist") {
		t.Errorf("dead-lettered %s with reason %q, want m-2 with one saying exchange ex-x does not exist", dl.MessageId, reason)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the handler ran %d times for two messages, want 2", n)
	}
}

const mixedFlow = `version: acemq.flow/v1
name: mx
plugins:
  k: {command: ./not-started}
pipelines:
  - name: p
    steps:
      - {name: a, handler: k.echo, queue_type: classic, concurrency: 8, prefetch: 20}
      - {name: b, handler: k.echo, queue_type: classic, concurrency: 8, prefetch: 20}
`

// TestOneBadSlipHurtsNoOtherMessage sends many runs, every tenth with a
// slip whose next stop names an exchange that does not exist, all asking
// for a reply. A bad destination is that message's outcome alone: each bad
// run is dead-lettered once, naming the missing exchange, and answered as
// such; every other run completes once and is answered once. Before, the
// 404 closed the runtime's one publishing channel, failing every publish in
// flight on it: other runs' outputs were published again (duplicates),
// their replies lost, and bad messages dead-lettered many times over.
func TestOneBadSlipHurtsNoOtherMessage(t *testing.T) {
	url := testenv.VHost(t)
	const runs, every = 1000, 10
	var mu sync.Mutex
	calls := map[string]int{} // step:correlation id → calls
	rt, _ := runtimetest.Start(t, url, mixedFlow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{
		"k.echo": func(_ context.Context, req runtime.Request) (decide.Result, error) {
			mu.Lock()
			calls[fmt.Sprintf("step %d of run %s", req.Envelope.RoutePosition, decide.RunID(req.Envelope))]++
			mu.Unlock()
			return decide.Result{Payload: req.Payload}, nil
		}}})
	ch := channelOn(t, url)()
	if _, err := ch.QueueDeclare("replies", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	bad := `{"steps":[{"exchange":"","routingKey":"p.a","name":"a"},{"exchange":"no-such-exchange","routingKey":"k","name":"b"}],"done":[]}`
	for i := range runs {
		p := amqp.Publishing{MessageId: fmt.Sprintf("run-%d", i), ContentType: "application/json", ReplyTo: "replies", Body: []byte(`{"id":1}`)}
		if i%every == 0 {
			p.Headers = amqp.Table{plan.HeaderSlip: bad}
		}
		if err := ch.PublishWithContext(t.Context(), "", "p.a", false, false, p); err != nil {
			t.Fatal(err)
		}
	}
	replies := map[string]amqp.Delivery{}
	dupReplies := 0
	testenv.Eventually(t, 60*time.Second, func() error {
		for {
			d, ok, err := ch.Get("replies", true)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if _, seen := replies[d.CorrelationId]; seen {
				dupReplies++
			}
			replies[d.CorrelationId] = d
		}
		if len(replies) < runs {
			return testenv.Errorf("%d of %d runs answered", len(replies), runs)
		}
		return nil
	})
	for i := range runs {
		id := fmt.Sprintf("run-%d", i)
		outcome, _ := replies[id].Headers[plan.HeaderOutcome].(string)
		reason, _ := replies[id].Headers[plan.HeaderError].(string)
		switch {
		case i%every == 0 && (outcome != "dead-lettered" || !strings.Contains(reason, `exchange "no-such-exchange"`) || !strings.Contains(reason, "does not exist")):
			t.Errorf("run %s with a bad slip answered %q (%q), want dead-lettered naming the missing exchange", id, outcome, reason)
		case i%every != 0 && outcome != "completed":
			t.Errorf("run %s answered %q (%q), want completed", id, outcome, reason)
		}
	}
	a := counters(t, rt, "p.a", decide.OutcomeAcknowledged, runs-runs/every)
	b := counters(t, rt, "p.b", decide.OutcomeAcknowledged, runs-runs/every)
	if dupReplies != 0 || a[runtime.OutcomeRejected] != 0 || b[runtime.OutcomeRejected] != 0 || a[decide.OutcomeDeadLettered] != runs/every {
		t.Errorf("%d replies twice; p.a counted %v, p.b %v; want no reply twice, nothing handed back, %d dead-lettered", dupReplies, a, b, runs/every)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range calls {
		if n != 1 {
			t.Errorf("the handler ran %d times for %s, want once", n, k)
		}
	}
	dlq, err := ch.QueueDeclarePassive("p.a.dlq", true, false, false, false, nil)
	if err != nil || dlq.Messages != runs/every {
		t.Errorf("p.a.dlq holds %d messages (%v), want %d: each bad run once", dlq.Messages, err, runs/every)
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

// TestAResultTheBrokerRefusesIsPublishedAgainUntilItTakesIt fills step b's
// queue (a policy: at most one message, then reject-publish), so the broker
// nacks step a's second result. Nothing is wrong with that message: its
// delivery is held and its result published again, the handler not run
// again, no attempt spent, until b has room. Before, it went round a's
// retry ladder re-running the handler, and after its last attempt was
// dead-lettered: a broker's trouble outlasting the ladder (a leader
// election under load, a full queue downstream) sent healthy messages to
// .dlq by the thousand.
func TestAResultTheBrokerRefusesIsPublishedAgainUntilItTakesIt(t *testing.T) {
	url := testenv.VHost(t)
	testenv.Rabbitmqctl(t, "set_policy", "-p", testenv.VHostOf(url), "--apply-to", "queues", "full-b", `^p\.b$`,
		`{"max-length":1,"overflow":"reject-publish"}`)
	var calls atomic.Int64
	rt, _ := runtimetest.Start(t, url, nackFlow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{
		"k.echo": func(_ context.Context, req runtime.Request) (decide.Result, error) {
			calls.Add(1)
			return decide.Result{Payload: req.Payload}, nil
		}}})
	ch := channelOn(t, url)()
	for _, id := range []string{"m-1", "m-2"} {
		if err := ch.PublishWithContext(t.Context(), "", "p.a", false, false, amqp.Publishing{MessageId: id, ContentType: "application/json",
			Body: []byte(`{"id":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Refused, then refused again at least once more: held, not retried.
	got := counters(t, rt, "p.a", runtime.OutcomeRepublished, 2)
	if got[decide.OutcomeAcknowledged] != 1 || got[decide.OutcomeRetried] != 0 || got[decide.OutcomeDeadLettered] != 0 || got[runtime.OutcomeRejected] != 0 {
		t.Fatalf("while b was full, p.a counted %v; want one acknowledged, nothing retried, dead-lettered or requeued", got)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("while b was full the handler ran %d times, want twice (once a message)", n)
	}
	first, ok, err := ch.Get("p.b", true)
	if err != nil || !ok {
		t.Fatalf("p.b holds no result (%v)", err)
	}
	second := deadLettered(t, ch, "p.b", &calls) // the held result, once b has room
	if first.MessageId == second.MessageId {
		t.Fatalf("p.b got the same result twice (%s)", first.MessageId)
	}
	if attempt, _ := second.Headers[plan.HeaderAttempt].(int64); attempt > 1 {
		t.Errorf("the held result carries attempt %d, want its first", attempt)
	}
	got = counters(t, rt, "p.a", decide.OutcomeAcknowledged, 2)
	if n := calls.Load(); n != 2 || got[decide.OutcomeRetried] != 0 {
		t.Errorf("the handler ran %d times, counters %v; want twice, nothing retried", n, got)
	}
	if _, ok, _ := ch.Get("p.a.dlq", true); ok {
		t.Error("p.a.dlq holds a message; want nothing dead-lettered")
	}
}

// startEchoCounting runs flow with k.echo in process, counting its calls.
func startEchoCounting(t *testing.T, url, flow string) *atomic.Int64 {
	t.Helper()
	var calls atomic.Int64
	handler := func(_ context.Context, req runtime.Request) (decide.Result, error) {
		calls.Add(1)
		return decide.Result{Payload: req.Payload}, nil
	}
	runtimetest.Start(t, url, flow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{"k.echo": handler}})
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

const replyFlow = `version: acemq.flow/v1
name: rp
plugins:
  k: {command: ./not-started}
pipelines:
  - name: p
    steps:
      - {name: a, handler: k.echo, queue_type: classic, retry: {max_attempts: 3, initial_delay: 1s, max_delay: 1s, jitter: 0}}
`

// counters waits until consumer id has counted want of outcome, and
// returns its counters then.
func counters(t *testing.T, rt *runtime.Runtime, id, outcome string, want int64) map[string]int64 {
	t.Helper()
	var got map[string]int64
	testenv.Eventually(t, 30*time.Second, func() error {
		st, err := rt.Consumer(t.Context(), id)
		if err != nil {
			return err
		}
		got = st.Counters
		if got[outcome] < want {
			return testenv.Errorf("consumer %s counted %v, want %d %s", id, got, want, outcome)
		}
		return nil
	})
	return got
}

// TestARefusedReplyHoldsNothingBack sends a message whose reply_to queue
// refuses every publish. The run has ended when its reply is sent: the
// delivery is acknowledged once, the handler run once. Before, the nacked
// reply failed the delivery, which went round the retry ladder re-running a
// handler that had succeeded, and at its last attempt was dead-lettered and
// requeued for ever (3,000 runs in four seconds).
func TestARefusedReplyHoldsNothingBack(t *testing.T) {
	url := testenv.VHost(t)
	var calls atomic.Int64
	rt, _ := runtimetest.Start(t, url, replyFlow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{
		"k.echo": func(_ context.Context, req runtime.Request) (decide.Result, error) {
			calls.Add(1)
			return decide.Result{Payload: req.Payload}, nil
		}}})
	ch := channelOn(t, url)()
	if _, err := ch.QueueDeclare("full-replies", false, false, false, false,
		amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(t.Context(), "", "p.a", false, false, amqp.Publishing{MessageId: "m-1", ContentType: "application/json",
		ReplyTo: "full-replies", Body: []byte(`{"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	got := counters(t, rt, "p.a", decide.OutcomeAcknowledged, 1)
	// A second message, without reply_to, is handled after the first: once
	// it is counted, the first had every chance to come round again.
	if err := ch.PublishWithContext(t.Context(), "", "p.a", false, false, amqp.Publishing{MessageId: "m-2", ContentType: "application/json",
		Body: []byte(`{"id":2}`)}); err != nil {
		t.Fatal(err)
	}
	got = counters(t, rt, "p.a", decide.OutcomeAcknowledged, 2)
	if n := calls.Load(); n != 2 || got[decide.OutcomeRetried] != 0 || got[decide.OutcomeDeadLettered] != 0 {
		t.Fatalf("the handler ran %d times for two messages, counters %v; want 2 runs, nothing retried or dead-lettered", n, got)
	}
}

// A message that cannot be handled (its slip does not parse) is
// dead-lettered at once; with p.a.dlq gone, it is parked in p.a.parked
// with both reasons, not requeued and refused again for ever.
func TestADeadLetterTheDLQRefusesIsParked(t *testing.T) {
	url := testenv.VHost(t)
	calls := startEchoCounting(t, url, publishFailFlow)
	ch := channelOn(t, url)()
	if _, err := ch.QueueDelete("p.a.dlq", false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(t.Context(), "", "p.a", false, false, amqp.Publishing{MessageId: "m-1", ContentType: "application/json",
		Headers: amqp.Table{plan.HeaderSlip: "not a slip"}, Body: []byte(`{"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	pk := deadLettered(t, ch, "p.a.parked", calls)
	reason, _ := pk.Headers[plan.HeaderError].(string)
	if !strings.Contains(reason, "slip") || !strings.Contains(reason, "p.a.dlq refused it") {
		t.Errorf("parked with reason %q, want the slip's and p.a.dlq's", reason)
	}
	if pk.MessageId != "m-1" || pk.DeliveryMode != amqp.Persistent {
		t.Errorf("parked %q delivery mode %d, want m-1, persistent", pk.MessageId, pk.DeliveryMode)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the handler ran %d times, want never (the slip is checked first)", n)
	}
}

// With p.a.dlq and p.a.parked both gone, the message waits, goes back to
// its queue and comes round again, until a dead-letter queue takes it.
// Before, it went back at once, thousands of times a second.
func TestAMessageNothingTakesComesRoundUntilSomethingDoes(t *testing.T) {
	url := testenv.VHost(t)
	const hold = 200 * time.Millisecond
	runtime.SetHoldBeforeRequeue(t, hold)
	rt, _ := runtimetest.Start(t, url, publishFailFlow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{
		"k.echo": func(_ context.Context, req runtime.Request) (decide.Result, error) {
			return decide.Result{Payload: req.Payload}, nil
		}}})
	ch := channelOn(t, url)()
	for _, q := range []string{"p.a.dlq", "p.a.parked"} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.PublishWithContext(t.Context(), "", "p.a", false, false, amqp.Publishing{MessageId: "m-1", ContentType: "application/json",
		Headers: amqp.Table{plan.HeaderSlip: "not a slip"}, Body: []byte(`{"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	counters(t, rt, "p.a", runtime.OutcomeRejected, 2)
	if waited := time.Since(sent); waited < 2*hold {
		t.Fatalf("the message went back to its queue twice within %s, want a wait of %s before each time", waited, hold)
	}
	if _, err := ch.QueueDeclare("p.a.dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	dl := deadLettered(t, ch, "p.a.dlq", &calls)
	if dl.MessageId != "m-1" {
		t.Errorf("p.a.dlq got %q, want m-1", dl.MessageId)
	}
	got := counters(t, rt, "p.a", decide.OutcomeDeadLettered, 1)
	if got[decide.OutcomeAcknowledged] != 0 {
		t.Errorf("counters %v: want nothing acknowledged", got)
	}
}

// A slip whose next stop has a routing key AMQP cannot carry (over 255
// bytes) makes a result that can never be published: dead-lettered once,
// with the reason, the connection kept.
func TestAResultAMQPCannotCarryIsDeadLettered(t *testing.T) {
	url := testenv.VHost(t)
	calls := startEchoCounting(t, url, publishFailFlow)
	ch := channelOn(t, url)()
	long := strings.Repeat("k", 300)
	slip := `{"steps":[{"exchange":"","routingKey":"p.a","name":"a"},{"exchange":"","routingKey":"` + long + `","name":"b"}],"done":[]}`
	if err := ch.PublishWithContext(t.Context(), "", "p.a", false, false, amqp.Publishing{MessageId: "m-1", ContentType: "application/json",
		Headers: amqp.Table{plan.HeaderSlip: slip}, Body: []byte(`{"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	dl := deadLettered(t, ch, "p.a.dlq", calls)
	if reason, _ := dl.Headers[plan.HeaderError].(string); !strings.Contains(reason, "could not be published") || !strings.Contains(reason, "255") {
		t.Errorf("dead-lettered with reason %q, want one saying the result could not be published, over 255 bytes", reason)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
}

// TestAHeldResultGoesBackToItsQueueWhenTheRuntimeStops: a delivery held
// while the broker refuses its result is not lost when the runtime stops:
// it goes back to its queue, and the runtime stops within its drain.
func TestAHeldResultGoesBackToItsQueueWhenTheRuntimeStops(t *testing.T) {
	url := testenv.VHost(t)
	testenv.Rabbitmqctl(t, "set_policy", "-p", testenv.VHostOf(url), "--apply-to", "queues", "full-b", `^p\.b$`,
		`{"max-length":1,"overflow":"reject-publish"}`)
	set, err := spec.Load(testenv.FlowFS(nackFlow), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(pl, runtime.Options{AMQPURL: url, DrainTimeout: time.Second, Handlers: map[string]runtime.HandlerFunc{
		"k.echo": func(_ context.Context, req runtime.Request) (decide.Result, error) {
			return decide.Result{Payload: req.Payload}, nil
		}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	<-rt.Started()
	ch := channelOn(t, url)()
	for _, id := range []string{"m-1", "m-2"} {
		if err := ch.PublishWithContext(t.Context(), "", "p.a", false, false, amqp.Publishing{MessageId: id, ContentType: "application/json",
			Body: []byte(`{"id":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	counters(t, rt, "p.a", runtime.OutcomeRepublished, 1)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the runtime did not stop within 30 s of its cancel, a delivery held")
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		q, err := ch.QueueDeclarePassive("p.a", true, false, false, false, nil)
		if err != nil {
			return err
		}
		if q.Messages != 1 {
			return testenv.Errorf("p.a holds %d messages, want the held one back", q.Messages)
		}
		return nil
	})
}
