package runtime

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/test/testenv"
)

// queues is a broker connection for one test, with queues of its own that
// are deleted when the test ends.
type queues struct {
	t   *testing.T
	url string
	ns  string
	top *broker.Topology
	pub *broker.Publisher
}

func newQueues(t *testing.T) *queues {
	t.Helper()
	url := testenv.AMQP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, url, broker.ConnOptions{Name: "acemq-flow test " + t.Name()})
	if err != nil {
		t.Fatalf("broker.Open: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	top := broker.NewTopology(conn, nil)
	t.Cleanup(func() { top.Close() })
	pub, err := broker.OpenPublisher(ctx, conn, broker.PublisherOptions{})
	if err != nil {
		t.Fatalf("OpenPublisher: %v", err)
	}
	t.Cleanup(func() { pub.Close() })
	return &queues{t: t, url: url, ns: testenv.Names(t), top: top, pub: pub}
}

// queue declares a classic queue named <ns>.<name> and returns its name.
func (q *queues) queue(name string) string {
	q.t.Helper()
	full := q.ns + "." + name
	err := q.top.DeclareQueue(q.t.Context(), broker.Queue{Name: full, Durable: true, Args: map[string]any{"x-queue-type": "classic"}})
	if err != nil {
		q.t.Fatalf("declare queue %q: %v", full, err)
	}
	q.t.Cleanup(func() { _, _ = q.top.DeleteQueue(context.Background(), full) })
	return full
}

// put publishes a message to queue and waits for its confirm.
func (q *queues) put(queue, id string, headers amqp.Table, body string) {
	q.t.Helper()
	err := q.pub.Publish(q.t.Context(), broker.Message{RoutingKey: queue, Publishing: amqp.Publishing{
		MessageId: id, CorrelationId: "corr-" + id, ContentType: "application/json",
		Headers: headers, Body: []byte(body),
	}})
	if err != nil {
		q.t.Fatalf("publish %q to %q: %v", id, queue, err)
	}
}

// waitDepth waits until queue holds want ready messages.
func (q *queues) waitDepth(queue string, want int) {
	q.t.Helper()
	testenv.Eventually(q.t, 10*time.Second, func() error {
		n, err := q.top.Depth(q.t.Context(), queue)
		if err != nil {
			return err
		}
		if n != want {
			return testenv.Errorf("queue %q holds %d message(s), want %d", queue, n, want)
		}
		return nil
	})
}

// drain takes every message of queue, in order, acknowledging each.
func (q *queues) drain(queue string) []amqp.Delivery {
	q.t.Helper()
	var out []amqp.Delivery
	for {
		d, err := q.top.Get(q.t.Context(), queue)
		if err != nil {
			q.t.Fatalf("get from %q: %v", queue, err)
		}
		if d == nil {
			return out
		}
		if err := d.Ack(); err != nil {
			q.t.Fatalf("ack: %v", err)
		}
		out = append(out, d.Delivery)
	}
}

func ids(ds []amqp.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.MessageId
	}
	return out
}

func failedHeaders(queue string, attempt int) amqp.Table {
	return amqp.Table{
		HeaderAttempt:       int64(attempt),
		HeaderError:         "charge declined",
		HeaderErrorKind:     "exhausted",
		HeaderFailedQueue:   queue,
		HeaderFailedAt:      "2026-09-09T14:03:15Z",
		HeaderRoute:         "validate,charge,ship",
		HeaderRoutePosition: int64(1),
		HeaderOrigin:        "shop",
	}
}

func TestReplayBringsADeadLetteredMessageBack(t *testing.T) {
	q := newQueues(t)
	target := q.queue("orders.charge")
	dlq := q.queue("orders.charge.dlq")
	q.put(dlq, "m-1", failedHeaders(target, 5), `{"order":1}`)
	// Dead-lettered by the broker: no failed-queue header, so the queue is
	// the dead-letter queue's name without .dlq.
	q.put(dlq, "m-2", amqp.Table{HeaderAttempt: int64(2)}, `{"order":2}`)

	var progress [][2]int
	sum, err := Replay(t.Context(), q.url, ReplayOptions{From: dlq,
		Progress: func(done, total int) { progress = append(progress, [2]int{done, total}) }})
	if err != nil {
		t.Fatalf("Replay(%s) = %v", dlq, err)
	}
	if sum.Moved != 2 || sum.Parked != 0 || sum.Left != 0 || sum.MovedTo[target] != 2 {
		t.Errorf("Replay(%s) summary = %+v, want 2 moved to %s, none parked or left", dlq, sum, target)
	}
	if want := [][2]int{{1, 2}, {2, 2}}; !slices.Equal(progress, want) {
		t.Errorf("progress calls = %v, want %v", progress, want)
	}
	// Acknowledged on the dead-letter queue only once the target held it.
	q.waitDepth(dlq, 0)
	got := q.drain(target)
	if !slices.Equal(ids(got), []string{"m-1", "m-2"}) {
		t.Fatalf("target holds %v, want [m-1 m-2]", ids(got))
	}
	m := got[0]
	env := ReadEnvelope(m)
	if env.Attempt != 1 || env.Replays != 1 {
		t.Errorf("replayed message: attempt %d, replays %d; want 1 and 1", env.Attempt, env.Replays)
	}
	if string(m.Body) != `{"order":1}` || m.CorrelationId != "corr-m-1" || m.ContentType != "application/json" {
		t.Errorf("replayed message changed: body %s, correlation %q, content type %q", m.Body, m.CorrelationId, m.ContentType)
	}
	for _, h := range []string{HeaderError, HeaderErrorKind, HeaderFailedQueue, HeaderFailedAt} {
		if _, ok := m.Headers[h]; ok {
			t.Errorf("replayed message still has header %s = %v", h, m.Headers[h])
		}
	}
	if strHeader(m.Headers[HeaderRoute]) != "validate,charge,ship" || env.RoutePosition != 1 || env.Origin != "shop" {
		t.Errorf("replayed message lost its envelope: headers %v", m.Headers)
	}
	if env := ReadEnvelope(got[1]); env.Attempt != 1 || env.Replays != 1 {
		t.Errorf("message without a failed-queue header: attempt %d, replays %d; want 1 and 1", env.Attempt, env.Replays)
	}
}

func TestReplayParksAMessageReplayedMaxReplaysTimes(t *testing.T) {
	q := newQueues(t)
	target := q.queue("orders.charge")
	dlq := q.queue("orders.charge.dlq")
	parked := q.queue("orders.charge.parked")
	h := failedHeaders(target, 5)
	h[HeaderReplays] = int64(3)
	q.put(dlq, "worn-out", h, `{}`)
	h2 := failedHeaders(target, 5)
	h2[HeaderReplays] = "2" // any client's numeric string counts too
	q.put(dlq, "one-more", h2, `{}`)

	sum, err := Replay(t.Context(), q.url, ReplayOptions{From: dlq})
	if err != nil {
		t.Fatalf("Replay(%s) = %v", dlq, err)
	}
	if sum.Moved != 1 || sum.Parked != 1 || sum.ParkedIn[parked] != 1 || sum.Left != 0 {
		t.Errorf("Replay(%s) summary = %+v, want 1 moved, 1 parked in %s", dlq, sum, parked)
	}
	q.waitDepth(dlq, 0)
	p := q.drain(parked)
	if !slices.Equal(ids(p), []string{"worn-out"}) {
		t.Fatalf("parked queue holds %v, want [worn-out]", ids(p))
	}
	env := ReadEnvelope(p[0])
	if env.Replays != 3 || env.Attempt != 5 || strHeader(p[0].Headers[HeaderError]) != "charge declined" {
		t.Errorf("parked message: replays %d, attempt %d, error %q; want it unchanged (3, 5, charge declined)",
			env.Replays, env.Attempt, p[0].Headers[HeaderError])
	}
	back := q.drain(target)
	if len(back) != 1 || ReadEnvelope(back[0]).Replays != 3 {
		t.Errorf("target holds %v, want one-more with replays 3", ids(back))
	}

	// Replaying the parked queue with the same limit leaves it there: it
	// neither parks it onto itself nor meets it again.
	q.put(parked, "worn-out", h, `{}`)
	sum, err = Replay(t.Context(), q.url, ReplayOptions{From: parked})
	if err != nil {
		t.Fatalf("Replay(%s) = %v", parked, err)
	}
	if sum.Skipped != 1 || sum.Left != 1 || len(sum.Actions) != 1 || !strings.Contains(sum.Actions[0].Left, "limit is 3") {
		t.Errorf("Replay(%s) summary = %+v, want the message left, saying the limit is 3", parked, sum)
	}
	q.waitDepth(parked, 1)
	// A higher limit replays it, keeping its message id.
	sum, err = Replay(t.Context(), q.url, ReplayOptions{From: parked, MaxReplays: 5})
	if err != nil || sum.Moved != 1 {
		t.Fatalf("Replay(%s, max 5) = %+v, %v; want 1 moved", parked, sum, err)
	}
	back = q.drain(target)
	if !slices.Equal(ids(back), []string{"worn-out"}) || ReadEnvelope(back[0]).Replays != 4 {
		t.Errorf("target holds %v, want worn-out with replays 4", ids(back))
	}
}

func TestReplayDryRunMovesNothing(t *testing.T) {
	q := newQueues(t)
	target := q.queue("orders.charge")
	dlq := q.queue("orders.charge.dlq")
	q.queue("orders.charge.parked")
	for i, id := range []string{"a", "b", "c"} {
		h := failedHeaders(target, 5)
		h[HeaderReplays] = int64(i + 1)
		q.put(dlq, id, h, `{}`)
	}

	sum, err := Replay(t.Context(), q.url, ReplayOptions{From: dlq, DryRun: true})
	if err != nil {
		t.Fatalf("Replay(%s, dry run) = %v", dlq, err)
	}
	if sum.Moved != 0 || sum.Parked != 0 || sum.Skipped != 3 || sum.Left != 3 {
		t.Errorf("dry run summary = %+v, want nothing moved, 3 left", sum)
	}
	want := []ReplayAction{
		{MessageID: "a", Queue: target, Replays: 2},
		{MessageID: "b", Queue: target, Replays: 3},
		{MessageID: "c", Queue: q.ns + ".orders.charge.parked", Parked: true, Replays: 3},
	}
	if !slices.Equal(sum.Actions, want) {
		t.Errorf("dry run actions = %+v, want %+v", sum.Actions, want)
	}
	q.waitDepth(dlq, 3)
	q.waitDepth(target, 0)
	got := q.drain(dlq)
	if !slices.Equal(ids(got), []string{"a", "b", "c"}) {
		t.Errorf("after a dry run the dead-letter queue holds %v, want [a b c] in that order", ids(got))
	}
	if ReadEnvelope(got[0]).Attempt != 5 {
		t.Errorf("a dry run changed a message: attempt %d, want 5", ReadEnvelope(got[0]).Attempt)
	}
}

func TestReplayToAMissingQueueLeavesTheMessageInTheDLQ(t *testing.T) {
	q := newQueues(t)
	dlq := q.queue("orders.charge.dlq")
	missing := q.ns + ".orders.nowhere"
	q.put(dlq, "m-404", failedHeaders(q.ns+".orders.charge", 5), `{}`)

	sum, err := Replay(t.Context(), q.url, ReplayOptions{From: dlq, To: missing})
	if err == nil {
		t.Fatalf("Replay(%s to %s) = nil error, want one saying the queue does not exist", dlq, missing)
	}
	for _, want := range []string{`"m-404"`, `queue "` + missing + `" does not exist`, `stays in "` + dlq + `"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Replay error = %q, want it to contain %s", err, want)
		}
	}
	if sum.Moved != 0 || sum.Left != 1 {
		t.Errorf("summary = %+v, want nothing moved, 1 left", sum)
	}
	q.waitDepth(dlq, 1)
	got := q.drain(dlq)
	if len(got) != 1 || got[0].MessageId != "m-404" || ReadEnvelope(got[0]).Attempt != 5 {
		t.Errorf("dead-letter queue holds %v, want m-404 unchanged", ids(got))
	}
}

func TestReplayStopsAtTheLimitAndCountsTheDepthFirst(t *testing.T) {
	q := newQueues(t)
	target := q.queue("orders.charge")
	dlq := q.queue("orders.charge.dlq")
	for _, id := range []string{"a", "b", "c"} {
		q.put(dlq, id, failedHeaders(target, 5), `{}`)
	}
	sum, err := Replay(t.Context(), q.url, ReplayOptions{From: dlq, Limit: 2})
	if err != nil || sum.Moved != 2 || sum.Left != 1 || sum.Total != 2 {
		t.Fatalf("Replay(%s, limit 2) = %+v, %v; want 2 moved, 1 left", dlq, sum, err)
	}
	q.waitDepth(dlq, 1)
	if got := ids(q.drain(target)); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("target holds %v, want [a b]", got)
	}

	if _, err := Replay(t.Context(), q.url, ReplayOptions{From: dlq, To: dlq}); err == nil {
		t.Errorf("Replay(%s to itself) = nil error, want a refusal", dlq)
	}
	_, err = Replay(t.Context(), q.url, ReplayOptions{From: q.ns + ".absent.dlq"})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Replay(absent queue) = %v, want an error saying it does not exist", err)
	}
}

func TestReplayLeavesAMessageWithNoQueueToGoBackTo(t *testing.T) {
	q := newQueues(t)
	target := q.queue("orders.charge")
	holding := q.queue("holding") // not a .dlq: only the header says where a message goes
	q.put(holding, "lost", amqp.Table{HeaderAttempt: int64(5)}, `{}`)
	q.put(holding, "known", failedHeaders(target, 5), `{}`)

	sum, err := Replay(t.Context(), q.url, ReplayOptions{From: holding})
	if err == nil || !strings.Contains(err.Error(), `message "lost" in queue "`+holding+`" has no `+HeaderFailedQueue+` header`) {
		t.Errorf("Replay(%s) error = %v, want one naming message lost and the missing header", holding, err)
	}
	if sum.Moved != 1 || sum.Skipped != 1 || sum.Left != 1 {
		t.Errorf("Replay(%s) summary = %+v, want 1 moved and 1 left", holding, sum)
	}
	q.waitDepth(holding, 1)
	if got := ids(q.drain(target)); !slices.Equal(got, []string{"known"}) {
		t.Errorf("target holds %v, want [known]", got)
	}
}
