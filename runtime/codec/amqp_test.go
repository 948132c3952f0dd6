package codec_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestAvroMessageThroughRabbitMQ sends an old writer's message through a
// real quorum queue, as the runtime will (the framed body, content_type
// and x-acemq-schema-id), and reads it with a newer compatible reader.
func TestAvroMessageThroughRabbitMQ(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := t.Context()
	store := memStore(t)
	v1 := flow(t, "shop", map[string]string{"Order": orderV1})
	writer := codec.New(store, codec.Options{})
	if err := writer.Register(ctx, []*spec.Flow{v1}); err != nil {
		t.Fatal(err)
	}
	body, id, err := writer.Encode(ctx, v1.Type("Order"), []byte(`{"id":"o-1","qty":3}`))
	if err != nil {
		t.Fatal(err)
	}

	ch := testenv.ConfirmedChannel(t, url)
	queue := testenv.Names(t)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
		ContentType: codec.ContentType, Headers: amqp.Table{codec.HeaderSchemaID: codec.HeaderValue(id)},
		DeliveryMode: amqp.Persistent, Body: body,
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := confirm.WaitContext(ctx); err != nil || !ok {
		t.Fatalf("publish to %s: confirmed %v, %v", queue, ok, err)
	}

	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var d amqp.Delivery
	select {
	case d = <-deliveries:
	case <-time.After(30 * time.Second):
		t.Fatalf("no delivery from %s within 30s", queue)
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	if !codec.IsAvro(d.ContentType, d.Body) || d.Headers[codec.HeaderSchemaID] != codec.HeaderValue(id) {
		t.Fatalf("delivered content_type %q, header %v: want the Avro content type and schema id %d", d.ContentType, d.Headers[codec.HeaderSchemaID], id)
	}
	v2 := flow(t, "shop", map[string]string{"Order": orderV2})
	reader := codec.New(store, codec.Options{})
	if err := reader.Register(ctx, []*spec.Flow{v2}); err != nil {
		t.Fatal(err)
	}
	out, gotID, err := reader.Decode(ctx, v2.Type("Order"), d.Body)
	if err != nil || gotID != id || string(out) != `{"channel":"web","id":"o-1","qty":3}` {
		t.Errorf("Decode(delivered body as v2) = %s (id %d), %v; want the v1 message with v2's default (id %d)", out, gotID, err, id)
	}
}
