// Package queuetest gives a test a broker connection, a publisher and
// queues of its own (deleted when the test ends), for tests that work on
// queues directly: replay, inspect.
package queuetest

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/test/testenv"
)

// Env is one test's connection to the broker of ACEMQ_TEST_AMQP_URL.
type Env struct {
	URL string            // the broker URL
	NS  string            // the test's own name prefix
	Top *broker.Topology  // for declaring, inspecting and getting
	Pub *broker.Publisher // confirmed publishing
	t   *testing.T
}

// New connects for t (skipping it when the broker URL is unset) and closes
// everything in t.Cleanup.
func New(t *testing.T) *Env {
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
	return &Env{URL: url, NS: testenv.Names(t), Top: top, Pub: pub, t: t}
}

// Queue declares a classic queue named <NS>.<name>, deleted when the test
// ends, and returns its name.
func (e *Env) Queue(name string) string {
	e.t.Helper()
	full := e.NS + "." + name
	err := e.Top.DeclareQueue(e.t.Context(), broker.Queue{Name: full, Durable: true, Args: map[string]any{"x-queue-type": "classic"}})
	if err != nil {
		e.t.Fatalf("declare queue %q: %v", full, err)
	}
	e.t.Cleanup(func() { _, _ = e.Top.DeleteQueue(context.Background(), full) })
	return full
}

// Put publishes a message to queue (correlation id "corr-<id>") and waits
// for its confirm.
func (e *Env) Put(queue, id string, headers amqp.Table, body string) {
	e.t.Helper()
	err := e.Pub.Publish(e.t.Context(), broker.Message{RoutingKey: queue, Publishing: amqp.Publishing{
		MessageId: id, CorrelationId: "corr-" + id, ContentType: "application/json",
		Headers: headers, Body: []byte(body),
	}})
	if err != nil {
		e.t.Fatalf("publish %q to %q: %v", id, queue, err)
	}
}

// WaitDepth waits until queue holds want ready messages.
func (e *Env) WaitDepth(queue string, want int) {
	e.t.Helper()
	testenv.Eventually(e.t, 10*time.Second, func() error {
		n, err := e.Top.Depth(e.t.Context(), queue)
		if err != nil {
			return err
		}
		if n != want {
			return testenv.Errorf("queue %q holds %d message(s), want %d", queue, n, want)
		}
		return nil
	})
}

// Drain takes every message of queue, in order, acknowledging each.
func (e *Env) Drain(queue string) []amqp.Delivery {
	e.t.Helper()
	var out []amqp.Delivery
	for {
		d, err := e.Top.Get(e.t.Context(), queue)
		if err != nil {
			e.t.Fatalf("get from %q: %v", queue, err)
		}
		if d == nil {
			return out
		}
		if err := d.Ack(); err != nil {
			e.t.Fatalf("ack: %v", err)
		}
		out = append(out, d.Delivery)
	}
}

// Consume subscribes to queue with automatic acknowledgement on a
// connection of its own, closed when the test ends, and returns the
// deliveries.
func (e *Env) Consume(queue string) <-chan amqp.Delivery {
	e.t.Helper()
	conn, err := amqp.Dial(e.URL)
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	e.t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		e.t.Fatalf("open channel: %v", err)
	}
	dels, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		e.t.Fatalf("consume %q: %v", queue, err)
	}
	return dels
}
