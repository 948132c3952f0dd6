package ops

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/queuetest"
)

func TestInspectShowsMessagesAndLeavesTheQueueAsItWas(t *testing.T) {
	q := queuetest.New(t)
	dlq := q.Queue("orders.charge.dlq")
	routed := failedHeaders(q.NS+".orders.charge", 5)
	routed[plan.HeaderRoute] = "validate,reserve,dispatch"
	routed[plan.HeaderReplays] = int64(2)
	q.Put(dlq, "routed", routed, `{"order":1}`)
	q.Put(dlq, "slipped", amqp.Table{plan.HeaderAttempt: int64(1), plan.HeaderSlip: `{"steps":[` +
		`{"exchange":"orders-events","routingKey":"order.charge","name":"charge"},` +
		`{"exchange":"orders-events","routingKey":"order.ship","name":"ship"}],"done":[` +
		`{"exchange":"orders-events","routingKey":"order.validate","name":"validate","completedAt":"2026-09-09T14:03:11Z"},` +
		`{"exchange":"orders-events","routingKey":"order.approve","name":"approve","completedAt":"2026-09-09T14:03:12.5Z"}]}`}, `{}`)
	big := strings.Repeat("x", 300)
	q.Put(dlq, "big", amqp.Table{"x-death": []any{amqp.Table{
		"queue": q.NS + ".orders.charge", "reason": "delivery_limit", "count": int64(1),
		"time": time.Date(2026, 9, 9, 14, 3, 20, 0, time.UTC)}}}, "\x00bin\n"+big)

	view, err := Inspect(t.Context(), q.URL, dlq, 2)
	if err != nil {
		t.Fatalf("Inspect(%s, 2) = %v", dlq, err)
	}
	if view.Depth != 3 || len(view.Messages) != 2 {
		t.Fatalf("Inspect(%s, 2): depth %d, %d message(s); want 3 and 2", dlq, view.Depth, len(view.Messages))
	}
	r := view.Messages[0]
	if r.MessageID != "routed" || r.CorrelationID != "corr-routed" || r.Attempt != 5 || r.Replays != 2 ||
		r.ErrorKind != "exhausted" || r.Error != "charge declined" || r.FailedQueue != q.NS+".orders.charge" ||
		r.FailedAt != "2026-09-09T14:03:15Z" {
		t.Errorf("Inspect: first message = %+v", r)
	}
	if r.RouteText != "validate,[reserve],dispatch" || r.RoutePosition == nil || *r.RoutePosition != 1 {
		t.Errorf("Inspect: route = %q at %v, want validate,[reserve],dispatch at 1", r.RouteText, r.RoutePosition)
	}
	if r.Preview != `{"order":1}` || r.Size != 11 || r.Truncated {
		t.Errorf("Inspect: preview %q (size %d, truncated %v), want the whole payload", r.Preview, r.Size, r.Truncated)
	}
	s := view.Messages[1]
	if want := "validate ✓ 14:03:11 → approve ✓ 14:03:12 → [charge] → ship"; s.SlipText != want {
		t.Errorf("Inspect: slip = %q, want %q", s.SlipText, want)
	}
	if s.RouteText != "" || len(s.Slip) == 0 {
		t.Errorf("Inspect: slipped message has route %q and slip %s", s.RouteText, s.Slip)
	}

	// Nothing lost and nothing reordered.
	q.WaitDepth(dlq, 3)
	view, err = Inspect(t.Context(), q.URL, dlq, 10)
	if err != nil {
		t.Fatalf("Inspect(%s, 10) = %v", dlq, err)
	}
	var got []string
	for _, m := range view.Messages {
		got = append(got, m.MessageID)
	}
	if !slices.Equal(got, []string{"routed", "slipped", "big"}) {
		t.Errorf("second Inspect shows %v, want [routed slipped big]", got)
	}
	b := view.Messages[2]
	if b.Size != 305 || !b.Truncated || !strings.HasPrefix(b.Preview, `\u0000bin\nxxx`) || strings.Count(b.Preview, "x") != PreviewBytes-5 {
		t.Errorf("Inspect: big payload preview %q (size %d, truncated %v)", b.Preview, b.Size, b.Truncated)
	}
	if b.DeathReason != "delivery_limit" || b.FailedQueue != q.NS+".orders.charge" || b.FailedAt != "2026-09-09T14:03:20Z" {
		t.Errorf("Inspect: broker-dead-lettered message: reason %q, failed in %q at %q", b.DeathReason, b.FailedQueue, b.FailedAt)
	}
	q.WaitDepth(dlq, 3)
	if got := ids(q.Drain(dlq)); !slices.Equal(got, []string{"routed", "slipped", "big"}) {
		t.Errorf("after Inspect the queue holds %v, want [routed slipped big]", got)
	}

	if _, err := Inspect(t.Context(), q.URL, q.NS+".absent", 1); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Inspect(absent queue) = %v, want an error saying it does not exist", err)
	}
}

func TestInspectPreviewEscapesWhatIsNotPrintable(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		max  int
		want string
		cut  bool
	}{
		{"JSON stays as it is", []byte(`{"a":"b c"}`), 200, `{"a":"b c"}`, false},
		{"control characters are escaped", []byte("a\nb\tc\x00\x1b"), 200, `a\nb\tc\u0000\u001b`, false},
		{"bytes that are not UTF-8 are escaped", []byte{'a', 0xff, 0xfe}, 200, `a\xff\xfe`, false},
		{"text in other scripts is kept", []byte("Zürich ✓"), 200, "Zürich ✓", false},
		{"the preview stops at the limit", []byte("abcdef"), 4, "abcd", true},
		{"a rune cut at the limit is escaped", []byte("aé"), 2, `a\xc3`, true},
		{"invisible characters are escaped", []byte("a\u200bb"), 200, `a\u200bb`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, cut := Preview(tc.in, tc.max)
			if got != tc.want || cut != tc.cut {
				t.Errorf("Preview(%q, %d) = %q, %v; want %q, %v", tc.in, tc.max, got, cut, tc.want, tc.cut)
			}
		})
	}
}

// TestInspectShowsAQuorumQueuesDeliveryCount: on a quorum queue each
// inspect returns the message it showed, and the broker counts that return;
// the view shows the count, so that a person sees a message nearing the
// queue's delivery limit.
func TestInspectShowsAQuorumQueuesDeliveryCount(t *testing.T) {
	q := queuetest.New(t)
	name := q.NS + ".quorum"
	if err := q.Top.DeclareQueue(t.Context(), broker.Queue{Name: name, Durable: true, Args: map[string]any{"x-queue-type": "quorum"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = q.Top.DeleteQueue(context.Background(), name) })
	q.Put(name, "m", amqp.Table{plan.HeaderAttempt: int64(1)}, `{}`)
	for want := range 3 {
		q.WaitDepth(name, 1)
		view, err := Inspect(t.Context(), q.URL, name, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(view.Messages) != 1 || view.Messages[0].Deliveries != want {
			t.Fatalf("inspect %d: %+v, want the message returned %d time(s) before", want+1, view.Messages, want)
		}
	}
}
