package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestPublishConfirmedAndRouted(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 16)

	if err := p.Publish(t.Context(), msg(q, "m-1", []byte("hello"))); err != nil {
		t.Fatalf("Publish(to %s) = %v, want nil", q, err)
	}
	d, err := e.topo.Get(t.Context(), q)
	if err != nil || d == nil {
		t.Fatalf("Get(%s) = %v, %v; want the message", q, d, err)
	}
	if d.MessageId != "m-1" || string(d.Body) != "hello" || d.DeliveryMode != amqp.Persistent {
		t.Errorf("Get(%s) = id %q body %q mode %d, want m-1 hello persistent", q, d.MessageId, d.Body, d.DeliveryMode)
	}
	if err := d.Ack(); err != nil {
		t.Errorf("Ack() = %v", err)
	}
	if err := d.Ack(); !errors.Is(err, ErrAlreadySettled) {
		t.Errorf("second Ack() = %v, want ErrAlreadySettled", err)
	}
	e.waitDepth(q, 0)
}

func TestPublishUnroutableIsAnError(t *testing.T) {
	e := newEnv(t)
	x := e.exchange("events", "direct")
	p := e.publisher(e.conn("pub"), 64)

	err := p.Publish(t.Context(), Message{Exchange: x, RoutingKey: "nobody.listens", Publishing: amqp.Publishing{MessageId: "m-1"}})
	var ue *UnroutableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnroutable) {
		t.Fatalf("Publish(unbound key) = %v, want *UnroutableError", err)
	}
	if ue.Exchange != x || ue.RoutingKey != "nobody.listens" || !strings.Contains(err.Error(), x) || !strings.Contains(err.Error(), "nobody.listens") {
		t.Errorf("UnroutableError = %+v (%q), want it to name exchange %s and key nobody.listens", ue, err, x)
	}
}

func TestPublishOutcomesStayCorrelatedInFlight(t *testing.T) {
	e := newEnv(t)
	x := e.exchange("events", "direct")
	q := e.queue("bound", "quorum")
	if err := e.topo.Bind(t.Context(), Binding{Queue: q, Exchange: x, RoutingKey: "bound"}); err != nil {
		t.Fatal(err)
	}
	p := e.publisher(e.conn("pub"), 64)

	const n = 400
	pending := make([]*Pending, n)
	for i := range n {
		key := "bound"
		if i%3 == 0 {
			key = "unbound"
		}
		var err error
		pending[i], err = p.PublishAsync(t.Context(), Message{Exchange: x, RoutingKey: key, Publishing: amqp.Publishing{MessageId: fmt.Sprint(i)}})
		if err != nil {
			t.Fatalf("PublishAsync(%d) = %v", i, err)
		}
	}
	routed := 0
	for i, pd := range pending {
		err := pd.Wait(t.Context())
		if i%3 == 0 {
			if !errors.Is(err, ErrUnroutable) {
				t.Errorf("message %d to an unbound key: %v, want ErrUnroutable", i, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("message %d to a bound key: %v, want nil", i, err)
		}
		routed++
	}
	e.waitDepth(q, routed)
	if s := p.Stats(); s.Confirmed != int64(routed) || s.Unroutable != int64(n-routed) || s.InFlight != 0 {
		t.Errorf("Stats() = %+v, want %d confirmed, %d unroutable, none in flight", s, routed, n-routed)
	}
}

func TestPublishToMissingExchangeFailsAndThePublisherRecovers(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 16)

	err := p.Publish(t.Context(), Message{Exchange: e.ns + "-missing", RoutingKey: "k", Publishing: amqp.Publishing{MessageId: "m-1"}})
	if err == nil || ReplyCode(err) != amqp.NotFound || !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("Publish(to a missing exchange) = %v, want an indeterminate error with reply code 404", err)
	}
	if !strings.Contains(err.Error(), e.ns+"-missing") {
		t.Errorf("Publish(to a missing exchange) = %q, want it to name the exchange", err)
	}
	if err := p.Publish(t.Context(), msg(q, "m-2", nil)); err != nil {
		t.Fatalf("Publish after the channel error = %v, want nil", err)
	}
	e.waitDepth(q, 1)
	if s := p.Stats(); s.Channels != 2 {
		t.Errorf("Stats().Channels = %d, want 2 (reopened once)", s.Channels)
	}
}

func TestPublishFuncCallsBackOnce(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "classic")
	p := e.publisher(e.conn("pub"), 8)

	done := make(chan error, 100)
	for i := range 100 {
		if err := p.PublishFunc(t.Context(), msg(q, fmt.Sprint(i), nil), func(err error) { done <- err }); err != nil {
			t.Fatalf("PublishFunc(%d) = %v", i, err)
		}
	}
	for range 100 {
		if err := <-done; err != nil {
			t.Errorf("PublishFunc callback = %v, want nil", err)
		}
	}
	e.waitDepth(q, 100)
	if err := p.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := p.Publish(context.Background(), msg(q, "late", nil)); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}

func TestPublishOfAnUnencodableHeaderFailsAtOnce(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "classic")
	p := e.publisher(e.conn("pub"), 8)
	m := msg(q, "bad", nil)
	m.Headers = amqp.Table{"x-bad": struct{}{}}
	if err := p.Publish(t.Context(), m); err == nil || errors.Is(err, ErrIndeterminate) {
		t.Fatalf("Publish(bad header) = %v, want an immediate error", err)
	}
	if err := p.Publish(t.Context(), msg(q, "good", nil)); err != nil {
		t.Fatalf("Publish after a refused message = %v", err)
	}
	if s := p.Stats(); s.Channels != 1 || s.InFlight != 0 {
		t.Errorf("Stats() = %+v, want the first channel still in use and nothing in flight", s)
	}
}

func TestPendingWaitGivesUpWithAnIndeterminateError(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 8)
	pd, err := p.PublishAsync(t.Context(), msg(q, "m-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := pd.Wait(ctx); !errors.Is(err, ErrIndeterminate) || !errors.Is(err, context.Canceled) {
		t.Errorf("Wait(cancelled ctx) = %v, want indeterminate wrapping context.Canceled", err)
	}
	if err := pd.Err(); err != nil {
		t.Errorf("Err() = %v, want the publish confirmed all the same", err)
	}
}
