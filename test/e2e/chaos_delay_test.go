//go:build chaos

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestChaosBrokerRestartKeepsDelayedMessages: messages waiting in the
// delay ladder's levels when the broker stops (rabbitmqctl stop_app, then
// start_app) are all delivered once it is back, by the runtime that
// reconnects: the levels are quorum queues and the messages persistent.
// It restarts the whole broker: `make chaos` runs it alone.
func TestChaosBrokerRestartKeepsDelayedMessages(t *testing.T) {
	url := testenv.VHost(t)
	p := startRuntime(t, url, writeFlow(t, delayedStep))
	ch := dial(t, url)
	const dest, n = "delayed.dest", 100
	if _, err := ch.QueueDeclare(dest, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var pending []*amqp.DeferredConfirmation
	for i := range n {
		m := decide.Message{MessageID: fmt.Sprintf("d%03d", i), DeliveryMode: decide.Persistent, Body: []byte("{}")}
		ex, key, err := decide.Delay(&m, "", dest, now.Add(time.Duration(3+i%10)*time.Second), now)
		if err != nil {
			t.Fatal(err)
		}
		pb := wire.Publishing(m).Publishing
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), ex, key, true, false, pb)
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
			t.Fatalf("a delayed message was not confirmed: %v", err)
		}
	}
	testenv.Rabbitmqctl(t, "stop_app")
	testenv.Rabbitmqctl(t, "start_app")

	var dels <-chan amqp.Delivery
	testenv.Eventually(t, 60*time.Second, func() error {
		conn, err := amqp.Dial(url)
		if err != nil {
			return err
		}
		t.Cleanup(func() { conn.Close() })
		c, err := conn.Channel()
		if err != nil {
			return err
		}
		dels, err = c.Consume(dest, "", true, false, false, false, nil)
		return err
	})
	seen := map[string]bool{}
	deadline := time.After(90 * time.Second)
	for len(seen) < n {
		select {
		case d := <-dels:
			seen[d.MessageId] = true
		case <-deadline:
			t.Fatalf("%d of %d delayed messages delivered within 90 s of the restart; runtime log:\n%s", len(seen), n, tail(p.output(), 40))
		}
	}
}
