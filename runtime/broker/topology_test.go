package broker

import (
	"context"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestCheckQueuesNamesEveryMissingQueueInOneError(t *testing.T) {
	e := newEnv(t)
	there := e.queue("there", "quorum")
	a, b := e.ns+"-orders.nwe", e.ns+"-audit.lg"

	err := e.topo.CheckQueues(t.Context(), a, there, b)
	var me *MissingQueuesError
	if !errors.As(err, &me) {
		t.Fatalf("CheckQueues = %v, want *MissingQueuesError", err)
	}
	if len(me.Queues) != 2 || me.Queues[0] != a || me.Queues[1] != b {
		t.Errorf("CheckQueues missing = %v, want [%s %s]", me.Queues, a, b)
	}
	if !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) || strings.Contains(err.Error(), there) {
		t.Errorf("CheckQueues = %q, want both missing queues named and not %s", err, there)
	}
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("CheckQueues = %v, want it to match ErrNotFound", err)
	}
	// Nothing was created by asking.
	if err := e.topo.CheckQueues(t.Context(), a); err == nil {
		t.Errorf("CheckQueues(%s) after the check = nil, want the queue still missing", a)
	}
	if err := e.topo.CheckQueues(t.Context(), there); err != nil {
		t.Errorf("CheckQueues(%s) = %v, want nil", there, err)
	}
}

func TestDeclaringQuorumOverAClassicQueueSaysSoInWords(t *testing.T) {
	e := newEnv(t)
	q := e.queue("orders.charge", "classic")

	err := e.topo.DeclareQueue(t.Context(), Queue{Name: q, Durable: true, Args: map[string]any{"x-queue-type": "quorum"}})
	want := `queue "` + q + `" exists on the broker as a classic queue but the flow declares it quorum; delete the queue or declare it as it is`
	var de *DriftError
	if !errors.As(err, &de) || err.Error() != want {
		t.Fatalf("DeclareQueue(quorum over classic) =\n %v\nwant\n %s", err, want)
	}
	if ReplyCode(err) != amqp.PreconditionFailed {
		t.Errorf("ReplyCode = %d, want 406", ReplyCode(err))
	}
	// The refusal closed the declaring channel; the next declaration works.
	if err := e.topo.DeclareQueue(t.Context(), Queue{Name: q, Durable: true, Args: map[string]any{"x-queue-type": "classic"}}); err != nil {
		t.Errorf("DeclareQueue(as it is) = %v, want nil", err)
	}
}

func TestDeclareReportsEveryProblemAtOnce(t *testing.T) {
	e := newEnv(t)
	q1 := e.queue("one", "classic")
	x := e.exchange("events", "direct")
	q2 := e.ns + "-two"
	t.Cleanup(func() { e.topo.DeleteQueue(context.Background(), q2) })

	err := e.topo.Declare(t.Context(),
		[]Exchange{{Name: x, Kind: "topic", Durable: true}},
		[]Queue{
			{Name: q1, Durable: true, Args: map[string]any{"x-queue-type": "quorum"}},
			{Name: q2, Durable: true, Args: map[string]any{"x-queue-type": "quorum", "x-delivery-limit": 20}},
		},
		[]Binding{{Queue: q2, Exchange: x, RoutingKey: "k"}, {Queue: q1, Exchange: x, RoutingKey: "k"}},
	)
	if err == nil {
		t.Fatal("Declare = nil, want the exchange and queue drift")
	}
	for _, want := range []string{`exchange "` + x + `" exists on the broker as a direct exchange but the flow declares it topic`, `queue "` + q1 + `" exists on the broker as a classic queue but the flow declares it quorum`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Declare = %q, want it to contain %q", err, want)
		}
	}
	if err := e.topo.CheckQueues(t.Context(), q2); err != nil {
		t.Errorf("queue %s declared after the refusals: %v", q2, err)
	}
}

func TestGetInspectsAndPutsBack(t *testing.T) {
	e := newEnv(t)
	q := e.queue("dlq", "quorum")
	p := e.publisher(e.conn("pub"), 8)
	for _, id := range []string{"a", "b"} {
		if err := p.Publish(t.Context(), msg(q, id, []byte(id))); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := e.topo.Depth(t.Context(), q); err != nil || n != 2 {
		t.Fatalf("Depth(%s) = %d, %v; want 2", q, n, err)
	}
	d, err := e.topo.Get(t.Context(), q)
	if err != nil || d == nil || d.MessageId != "a" {
		t.Fatalf("Get(%s) = %v, %v; want message a", q, d, err)
	}
	if err := d.Nack(true); err != nil {
		t.Fatalf("Nack(requeue) = %v", err)
	}
	e.waitDepth(q, 2)
	for range 2 {
		d, err := e.topo.Get(t.Context(), q)
		if err != nil || d == nil {
			t.Fatalf("Get(%s) = %v, %v", q, d, err)
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := e.topo.Get(t.Context(), q); d != nil || err != nil {
		t.Errorf("Get(empty %s) = %v, %v; want nil, nil", q, d, err)
	}
	if _, err := e.topo.Get(t.Context(), e.ns+"-missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	if _, err := e.topo.Depth(t.Context(), e.ns+"-missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Depth(missing) = %v, want ErrNotFound", err)
	}
	if ok, err := e.topo.ExchangeExists(t.Context(), e.ns+"-missing"); ok || err != nil {
		t.Errorf("ExchangeExists(missing) = %v, %v; want false, nil", ok, err)
	}
}
