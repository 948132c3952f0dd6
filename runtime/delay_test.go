package runtime_test

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestPublishInDeliversLater: a program that embeds the runtime publishes
// through the ladder with PublishIn; the message arrives at its queue once
// due, unchanged but for the ladder's headers. Before Run, PublishIn says
// the runtime is not running. The ladder's second lasts 100 ms here.
func TestPublishInDeliversLater(t *testing.T) {
	url := testenv.VHost(t)
	unit := 100 * time.Millisecond
	opts := runtime.Options{Delays: true, LadderUnit: unit}
	idle, err := runtime.New(&plan.Plan{}, runtime.Options{AMQPURL: url})
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.PublishIn(t.Context(), decide.Message{RoutingKey: "q"}, time.Second); !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("PublishIn before Run = %v, want ErrNotRunning", err)
	}
	rt := runtimetest.Run(t, url, &plan.Plan{}, opts)
	ch := testenv.ConfirmedChannel(t, url)
	if _, err := ch.QueueDeclare("reminders", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	got, err := ch.Consume("reminders", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	m := decide.Message{RoutingKey: "reminders", MessageID: "r1", Type: "Reminder", Body: []byte(`{"r":1}`), Headers: decide.Table{"k": "v"}}
	if err := rt.PublishIn(t.Context(), m, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Headers[plan.HeaderDueAt]; ok {
		t.Error("PublishIn changed the caller's message")
	}
	var d amqp.Delivery
	select {
	case d = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing delivered within 10s")
	}
	if waited := time.Since(sent); waited < 5*unit || waited > 5*unit+time.Second {
		t.Errorf("delivered %s after PublishIn, want 500ms (5 of the ladder's seconds) to 1.5s", waited)
	}
	if d.MessageId != "r1" || d.Type != "Reminder" || string(d.Body) != `{"r":1}` || d.Headers["k"] != "v" || d.Headers[plan.HeaderDeliverRoutingKey] != "reminders" {
		t.Errorf("delivered %s %s %s with headers %v", d.MessageId, d.Type, d.Body, d.Headers)
	}
}
