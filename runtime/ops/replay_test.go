package ops

import (
	"slices"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/test/queuetest"

	amqp "github.com/rabbitmq/amqp091-go"
)

func ids(ds []amqp.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.MessageId
	}
	return out
}

func failedHeaders(queue string, attempt int) amqp.Table {
	return amqp.Table{
		plan.HeaderAttempt:       int64(attempt),
		plan.HeaderError:         "charge declined",
		plan.HeaderErrorKind:     "exhausted",
		plan.HeaderFailedQueue:   queue,
		plan.HeaderFailedAt:      "2026-09-09T14:03:15Z",
		plan.HeaderRoute:         "validate,charge,ship",
		plan.HeaderRoutePosition: int64(1),
		plan.HeaderOrigin:        "shop",
	}
}

func TestReplayBringsADeadLetteredMessageBack(t *testing.T) {
	q := queuetest.New(t)
	target := q.Queue("orders.charge")
	dlq := q.Queue("orders.charge.dlq")
	q.Put(dlq, "m-1", failedHeaders(target, 5), `{"order":1}`)
	// Dead-lettered by the broker: no failed-queue header, so the queue is
	// the dead-letter queue's name without .dlq.
	// Its x-death names the queue it goes back to: kept, the broker's cycle
	// check would drop it the next time it is dead-lettered there.
	q.Put(dlq, "m-2", amqp.Table{plan.HeaderAttempt: int64(2), "x-first-death-queue": target, "x-death": []any{amqp.Table{
		"queue": target, "reason": "delivery_limit", "count": int64(1), "exchange": ""}}}, `{"order":2}`)

	var progress [][2]int
	sum, err := Replay(t.Context(), q.URL, ReplayOptions{From: dlq,
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
	q.WaitDepth(dlq, 0)
	got := q.Drain(target)
	if !slices.Equal(ids(got), []string{"m-1", "m-2"}) {
		t.Fatalf("target holds %v, want [m-1 m-2]", ids(got))
	}
	m := got[0]
	env := envelope(m)
	if env.Attempt != 1 || env.Replays != 1 {
		t.Errorf("replayed message: attempt %d, replays %d; want 1 and 1", env.Attempt, env.Replays)
	}
	if string(m.Body) != `{"order":1}` || m.CorrelationId != "corr-m-1" || m.ContentType != "application/json" {
		t.Errorf("replayed message changed: body %s, correlation %q, content type %q", m.Body, m.CorrelationId, m.ContentType)
	}
	for _, h := range []string{plan.HeaderError, plan.HeaderErrorKind, plan.HeaderFailedQueue, plan.HeaderFailedAt} {
		if _, ok := m.Headers[h]; ok {
			t.Errorf("replayed message still has header %s = %v", h, m.Headers[h])
		}
	}
	if decide.HeaderText(m.Headers[plan.HeaderRoute]) != "validate,charge,ship" || env.RoutePosition != 1 || env.Origin != "shop" {
		t.Errorf("replayed message lost its envelope: headers %v", m.Headers)
	}
	for _, h := range []string{"x-death", "x-first-death-queue"} {
		if _, ok := got[1].Headers[h]; ok {
			t.Errorf("replayed message still has the broker's %s header", h)
		}
	}
	if env := envelope(got[1]); env.Attempt != 1 || env.Replays != 1 {
		t.Errorf("message without a failed-queue header: attempt %d, replays %d; want 1 and 1", env.Attempt, env.Replays)
	}
}

func TestReplayParksAMessageReplayedMaxReplaysTimes(t *testing.T) {
	q := queuetest.New(t)
	target := q.Queue("orders.charge")
	dlq := q.Queue("orders.charge.dlq")
	parked := q.Queue("orders.charge.parked")
	h := failedHeaders(target, 5)
	h[plan.HeaderReplays] = int64(3)
	q.Put(dlq, "worn-out", h, `{}`)
	h2 := failedHeaders(target, 5)
	h2[plan.HeaderReplays] = "2" // any client's numeric string counts too
	q.Put(dlq, "one-more", h2, `{}`)

	sum, err := Replay(t.Context(), q.URL, ReplayOptions{From: dlq})
	if err != nil {
		t.Fatalf("Replay(%s) = %v", dlq, err)
	}
	if sum.Moved != 1 || sum.Parked != 1 || sum.ParkedIn[parked] != 1 || sum.Left != 0 {
		t.Errorf("Replay(%s) summary = %+v, want 1 moved, 1 parked in %s", dlq, sum, parked)
	}
	q.WaitDepth(dlq, 0)
	p := q.Drain(parked)
	if !slices.Equal(ids(p), []string{"worn-out"}) {
		t.Fatalf("parked queue holds %v, want [worn-out]", ids(p))
	}
	env := envelope(p[0])
	if env.Replays != 3 || env.Attempt != 5 || decide.HeaderText(p[0].Headers[plan.HeaderError]) != "charge declined" {
		t.Errorf("parked message: replays %d, attempt %d, error %q; want it unchanged (3, 5, charge declined)",
			env.Replays, env.Attempt, p[0].Headers[plan.HeaderError])
	}
	back := q.Drain(target)
	if len(back) != 1 || envelope(back[0]).Replays != 3 {
		t.Errorf("target holds %v, want one-more with replays 3", ids(back))
	}

	// Replaying the parked queue with the same limit leaves it there: it
	// neither parks it onto itself nor meets it again.
	q.Put(parked, "worn-out", h, `{}`)
	sum, err = Replay(t.Context(), q.URL, ReplayOptions{From: parked})
	if err != nil {
		t.Fatalf("Replay(%s) = %v", parked, err)
	}
	if sum.Skipped != 1 || sum.Left != 1 || len(sum.Actions) != 1 || !strings.Contains(sum.Actions[0].Left, "limit is 3") {
		t.Errorf("Replay(%s) summary = %+v, want the message left, saying the limit is 3", parked, sum)
	}
	q.WaitDepth(parked, 1)
	// A higher limit replays it, keeping its message id.
	sum, err = Replay(t.Context(), q.URL, ReplayOptions{From: parked, MaxReplays: 5})
	if err != nil || sum.Moved != 1 {
		t.Fatalf("Replay(%s, max 5) = %+v, %v; want 1 moved", parked, sum, err)
	}
	back = q.Drain(target)
	if !slices.Equal(ids(back), []string{"worn-out"}) || envelope(back[0]).Replays != 4 {
		t.Errorf("target holds %v, want worn-out with replays 4", ids(back))
	}
}

func TestReplayDryRunMovesNothing(t *testing.T) {
	q := queuetest.New(t)
	target := q.Queue("orders.charge")
	dlq := q.Queue("orders.charge.dlq")
	q.Queue("orders.charge.parked")
	for i, id := range []string{"a", "b", "c"} {
		h := failedHeaders(target, 5)
		h[plan.HeaderReplays] = int64(i + 1)
		q.Put(dlq, id, h, `{}`)
	}

	sum, err := Replay(t.Context(), q.URL, ReplayOptions{From: dlq, DryRun: true})
	if err != nil {
		t.Fatalf("Replay(%s, dry run) = %v", dlq, err)
	}
	if sum.Moved != 0 || sum.Parked != 0 || sum.Skipped != 3 || sum.Left != 3 {
		t.Errorf("dry run summary = %+v, want nothing moved, 3 left", sum)
	}
	want := []ReplayAction{
		{MessageID: "a", Queue: target, Replays: 2},
		{MessageID: "b", Queue: target, Replays: 3},
		{MessageID: "c", Queue: q.NS + ".orders.charge.parked", Parked: true, Replays: 3},
	}
	if !slices.Equal(sum.Actions, want) {
		t.Errorf("dry run actions = %+v, want %+v", sum.Actions, want)
	}
	q.WaitDepth(dlq, 3)
	q.WaitDepth(target, 0)
	got := q.Drain(dlq)
	if !slices.Equal(ids(got), []string{"a", "b", "c"}) {
		t.Errorf("after a dry run the dead-letter queue holds %v, want [a b c] in that order", ids(got))
	}
	if envelope(got[0]).Attempt != 5 {
		t.Errorf("a dry run changed a message: attempt %d, want 5", envelope(got[0]).Attempt)
	}
}

func TestReplayToAMissingQueueLeavesTheMessageInTheDLQ(t *testing.T) {
	q := queuetest.New(t)
	dlq := q.Queue("orders.charge.dlq")
	missing := q.NS + ".orders.nowhere"
	q.Put(dlq, "m-404", failedHeaders(q.NS+".orders.charge", 5), `{}`)

	sum, err := Replay(t.Context(), q.URL, ReplayOptions{From: dlq, To: missing})
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
	q.WaitDepth(dlq, 1)
	got := q.Drain(dlq)
	if len(got) != 1 || got[0].MessageId != "m-404" || envelope(got[0]).Attempt != 5 {
		t.Errorf("dead-letter queue holds %v, want m-404 unchanged", ids(got))
	}
}

func TestReplayStopsAtTheLimitAndCountsTheDepthFirst(t *testing.T) {
	q := queuetest.New(t)
	target := q.Queue("orders.charge")
	dlq := q.Queue("orders.charge.dlq")
	for _, id := range []string{"a", "b", "c"} {
		q.Put(dlq, id, failedHeaders(target, 5), `{}`)
	}
	sum, err := Replay(t.Context(), q.URL, ReplayOptions{From: dlq, Limit: 2})
	if err != nil || sum.Moved != 2 || sum.Left != 1 || sum.Total != 2 {
		t.Fatalf("Replay(%s, limit 2) = %+v, %v; want 2 moved, 1 left", dlq, sum, err)
	}
	q.WaitDepth(dlq, 1)
	if got := ids(q.Drain(target)); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("target holds %v, want [a b]", got)
	}

	if _, err := Replay(t.Context(), q.URL, ReplayOptions{From: dlq, To: dlq}); err == nil {
		t.Errorf("Replay(%s to itself) = nil error, want a refusal", dlq)
	}
	_, err = Replay(t.Context(), q.URL, ReplayOptions{From: q.NS + ".absent.dlq"})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Replay(absent queue) = %v, want an error saying it does not exist", err)
	}
}

func TestReplayLeavesAMessageWithNoQueueToGoBackTo(t *testing.T) {
	q := queuetest.New(t)
	target := q.Queue("orders.charge")
	holding := q.Queue("holding") // not a .dlq: only the header says where a message goes
	q.Put(holding, "lost", amqp.Table{plan.HeaderAttempt: int64(5)}, `{}`)
	q.Put(holding, "known", failedHeaders(target, 5), `{}`)

	sum, err := Replay(t.Context(), q.URL, ReplayOptions{From: holding})
	if err == nil || !strings.Contains(err.Error(), `message "lost" in queue "`+holding+`" has no `+plan.HeaderFailedQueue+` header`) {
		t.Errorf("Replay(%s) error = %v, want one naming message lost and the missing header", holding, err)
	}
	if sum.Moved != 1 || sum.Skipped != 1 || sum.Left != 1 {
		t.Errorf("Replay(%s) summary = %+v, want 1 moved and 1 left", holding, sum)
	}
	q.WaitDepth(holding, 1)
	if got := ids(q.Drain(target)); !slices.Equal(got, []string{"known"}) {
		t.Errorf("target holds %v, want [known]", got)
	}
}

// A transient message (the broker's own dead-lettering keeps a message's
// delivery mode) is parked persistent; and a message whose failed-queue
// header names the queue it is in stays there, with its reason, rather than
// going round to the back of it.
func TestReplayParksPersistentAndNeverIntoTheQueueItIsIn(t *testing.T) {
	q := queuetest.New(t)
	target := q.Queue("orders.charge")
	dlq := q.Queue("orders.charge.dlq")
	parked := q.Queue("orders.charge.parked")
	h := failedHeaders(target, 5)
	h[plan.HeaderReplays] = int64(3)
	if err := q.Pub.Publish(t.Context(), broker.Message{RoutingKey: dlq, Publishing: amqp.Publishing{
		MessageId: "transient", DeliveryMode: amqp.Transient, Expiration: "600000", Headers: h, Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Replay(t.Context(), q.URL, ReplayOptions{From: dlq}); err != nil {
		t.Fatalf("Replay(%s) = %v", dlq, err)
	}
	p := q.Drain(parked)
	if len(p) != 1 || p[0].DeliveryMode != amqp.Persistent || p[0].Expiration != "" {
		t.Fatalf("parked %v, want the message persistent, without expiration", p)
	}

	holding := q.Queue("holding")
	q.Put(holding, "moved-by-hand", failedHeaders(holding, 5), `{}`)
	sum, err := Replay(t.Context(), q.URL, ReplayOptions{From: holding})
	if err == nil || !strings.Contains(err.Error(), "--to") || sum.Moved != 0 || sum.Left != 1 {
		t.Fatalf("Replay(%s) = %+v, %v; want the message left, the error asking for --to", holding, sum, err)
	}
	got := q.Drain(holding)
	if len(got) != 1 || decide.HeaderText(decide.Table(got[0].Headers)[plan.HeaderError]) != "charge declined" || envelope(got[0]).Replays != 0 {
		t.Fatalf("holding keeps %v, want the message as it was", got)
	}
}

// envelope reads the envelope of a delivery taken from a queue.
func envelope(d amqp.Delivery) decide.Envelope { return decide.ReadEnvelope(wire.Message(&d)) }
