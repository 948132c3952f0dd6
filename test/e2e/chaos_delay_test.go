//go:build chaos

package e2e

import (
	"context"
	"fmt"
	"strings"
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
	// The broker stays down until every message is due, as a slow restart
	// does: each one's time passes while nothing can move it.
	testenv.Rabbitmqctl(t, "stop_app")
	time.Sleep(time.Until(now.Add(14 * time.Second)))
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
	// A hop between levels that the broker could not complete as it came
	// back (the level below not started yet) is tried again by its
	// dead-letter worker only after dead_letter_worker_publisher_confirm_timeout
	// (180 s by default): late, never lost. The wait allows one such retry.
	within := deadLetterRetry(t) + 90*time.Second
	seen := map[string]bool{}
	deadline := time.After(within)
	for len(seen) < n {
		select {
		case d, ok := <-dels:
			if !ok {
				t.Fatalf("the test's consumer of %s was closed after %d of %d delayed messages; runtime log:\n%s", dest, len(seen), n, tail(p.output(), 40))
			}
			seen[d.MessageId] = true
		case <-deadline:
			queues := testenv.Rabbitmqctl(t, "list_queues", "-p", testenv.VHostOf(url), "name", "messages", "messages_ready", "messages_unacknowledged")
			t.Fatalf("%d of %d delayed messages delivered within %s of the restart; the broker's queues:\n%s\nruntime log:\n%s", len(seen), n, within, queues, tail(p.output(), 40))
		}
	}
}

// deadLetterRetry is how long the broker's at-least-once dead-letter
// workers wait before they resend a message the target did not confirm
// (RabbitMQ's dead_letter_worker_publisher_confirm_timeout, in ms).
func deadLetterRetry(t *testing.T) time.Duration {
	out := testenv.Rabbitmqctl(t, "eval", "application:get_env(rabbit, dead_letter_worker_publisher_confirm_timeout).")
	var ms int64
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "{ok,%d}", &ms); err != nil || ms <= 0 {
		return 180 * time.Second // the broker's default
	}
	return time.Duration(ms) * time.Millisecond
}
