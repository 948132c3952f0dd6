package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestInspectGoldens inspects queues of fixed names, in a vhost of the
// test's own, holding messages with fixed ids, properties, headers and
// timestamps: what the runtime dead-lettered after its attempts (with a
// route), an itinerary's message (with its slip), one the broker
// dead-lettered (x-death) with a payload past the preview, full of bytes
// the preview escapes, one whose slip cannot be read, and a message on a
// quorum queue, which counts each inspect as a delivery.
//
// The commands run in the order of the cases: each inspect puts its
// messages back, redelivered, so a later view shows what the earlier ones
// did to the queue (redelivered, the quorum queue's delivery count).
func TestInspectGoldens(t *testing.T) {
	url := testenv.VHost(t)
	ch := testenv.ConfirmedChannel(t, url)
	const dlq, quorum = "orders.charge.dlq", "orders.ship"
	for q, kind := range map[string]string{dlq: "classic", quorum: "quorum"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": kind}); err != nil {
			t.Fatalf("declare %s: %v", q, err)
		}
	}
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	put := func(queue string, p amqp.Publishing) {
		t.Helper()
		p.DeliveryMode = amqp.Persistent
		c, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", queue, true, false, p)
		if err != nil {
			t.Fatalf("publish %s to %s: %v", p.MessageId, queue, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if ok, err := c.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish %s to %s: not confirmed (%v)", p.MessageId, queue, err)
		}
	}

	put(dlq, amqp.Publishing{
		MessageId: "m-1", CorrelationId: "corr-1", Type: "Order", ContentType: "application/json",
		Timestamp: at("2026-09-09T14:03:11Z"),
		Headers: amqp.Table{
			plan.HeaderAttempt: int32(5), plan.HeaderErrorKind: "exhausted", plan.HeaderError: "card declined: insufficient funds",
			plan.HeaderFailedQueue: "orders.charge", plan.HeaderFailedAt: "2026-09-09T14:03:15Z",
			plan.HeaderRoute: "validate,charge,ship", plan.HeaderRoutePosition: int32(1),
		},
		Body: []byte(`{"order_id":"ord-1","total":84.5}`),
	})
	put(dlq, amqp.Publishing{
		MessageId: "m-2", CorrelationId: "corr-2", Type: "Order", ContentType: "application/json",
		Timestamp: at("2026-09-09T14:05:00Z"),
		Headers: amqp.Table{
			plan.HeaderAttempt: int32(1), plan.HeaderReplays: int32(2), plan.HeaderErrorKind: "fatal", plan.HeaderError: "order total is negative",
			plan.HeaderFailedQueue: "orders.charge", plan.HeaderFailedAt: "2026-09-09T14:05:01Z",
			plan.HeaderSlip: `{"steps":[{"exchange":"orders-events","routingKey":"order.charge","name":"charge"},` +
				`{"exchange":"orders-events","routingKey":"order.ship","name":"ship"}],` +
				`"done":[{"exchange":"orders-events","routingKey":"order.validate","name":"validate","completedAt":"2026-09-09T14:04:59Z"}]}`,
		},
		Body: []byte(`{"order_id":"ord-2","total":-1}`),
	})
	// The broker's own dead-lettering, as RabbitMQ writes it in x-death.
	put(dlq, amqp.Publishing{
		MessageId: "m-3", ContentType: "text/plain",
		Headers: amqp.Table{"x-death": []any{amqp.Table{
			"queue": "orders.charge", "reason": "expired", "count": int64(1), "exchange": "",
			"routing-keys": []any{"orders.charge"}, "time": at("2026-09-09T14:10:00Z"),
		}}},
		Body: []byte("tab\there, newline\nthere, a NUL \x00, an invalid byte \xff, a zero-width space \u200b; " +
			strings.Repeat("and the rest of a long payload ", 8)),
	})
	put(dlq, amqp.Publishing{
		MessageId: "m-4", ContentType: "application/json",
		Headers: amqp.Table{plan.HeaderAttempt: int32(2), plan.HeaderSlip: "not a slip"},
	})
	put(quorum, amqp.Publishing{
		MessageId: "m-5", CorrelationId: "corr-5", Type: "Reservation", ContentType: "application/json",
		Timestamp: at("2026-09-09T14:20:00Z"),
		Headers: amqp.Table{
			plan.HeaderAttempt: int32(1), plan.HeaderRoute: "validate,reserve,dispatch", plan.HeaderRoutePosition: int32(2),
		},
		Body: []byte(`{"reservation_id":"res-5"}`),
	})

	cases := []struct {
		name string
		args []string
	}{
		{"dlq.txt", []string{dlq}},
		{"dlq-limit.txt", []string{dlq, "--limit", "2"}},
		{"dlq-depth.txt", []string{dlq, "--limit", "0"}},
		{"dlq.json", []string{dlq, "--format", "json"}},
		{"quorum.txt", []string{quorum}},
		{"quorum.json", []string{quorum, "--format", "json"}},
		{"quorum-again.txt", []string{quorum}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"inspect", "--amqp", url}, tc.args...)
			out, errOut, code := cli(t, args...)
			if code != 0 {
				t.Fatalf("acemq-flow %s: exit %d\nstderr: %s", strings.Join(tc.args, " "), code, errOut)
			}
			golden(t, filepath.Join("testdata/inspect", tc.name+".golden"), []byte(out))
		})
		// The messages are back before the next inspect looks.
		waitDepth(t, ch, dlq, 4)
		waitDepth(t, ch, quorum, 1)
	}
}

// waitDepth waits until queue holds want ready messages.
func waitDepth(t *testing.T, ch *amqp.Channel, queue string, want int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return err
		}
		if q.Messages != want {
			return testenv.Errorf("queue %s holds %d ready message(s), want %d", queue, q.Messages, want)
		}
		return nil
	})
}
