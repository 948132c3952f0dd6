package wire_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/wire"
)

// A message published with a user id (as another connection's user) is
// retried, dead-lettered and brought round without it: the broker refuses a
// publish whose user id is not the runtime's own user, closing the channel.
func TestRepublishedMessagesDropTheSendersUserID(t *testing.T) {
	q := plan.StepQueue("fulfilment", "reserve")
	c := &plan.Consumer{ID: plan.StepConsumerID("fulfilment", "reserve"), Kind: plan.KindStep, Flow: "shop", Queue: q,
		Pipeline: "fulfilment", Step: "reserve", Position: 1,
		Retry: plan.Retry{MaxAttempts: 3, Rungs: []plan.Rung{{Attempt: 2, Delay: plan.Duration(2 * time.Second), Queue: plan.RetryQueue(q, 2*time.Second)}}}}
	route := []string{"validate", "reserve", "dispatch"}
	now := time.Date(2026, 9, 9, 14, 3, 11, 0, time.UTC)
	in := decide.InboundOf(wire.Message(&amqp.Delivery{MessageId: "m-1", UserId: "orders-svc", AppId: "orders", Body: []byte(`{"id":"o-1"}`)}))
	decisions := map[string]decide.Decision{
		"retried":       decide.Decide(c, route, in, decide.Result{}, errors.New("down"), now, 1),
		"dead-lettered": decide.Decide(c, route, in, decide.Result{}, fmt.Errorf("%w: bad", decide.ErrFatal), now, 1),
		"in progress":   decide.InProgress(c, in),
	}
	for name, d := range decisions {
		if len(d.Publish) != 1 {
			t.Fatalf("%s: %d publishes, want 1", name, len(d.Publish))
		}
		if p := wire.Publishing(d.Publish[0].Message); p.UserId != "" || p.AppId != "orders" || p.MessageId != "m-1" {
			t.Errorf("%s: published user id %q, app id %q, message id %q; want no user id, the rest kept", name, p.UserId, p.AppId, p.MessageId)
		}
	}
	dl := wire.Message(&amqp.Delivery{UserId: "orders-svc", MessageId: "m-1"})
	if p := wire.Publishing(decide.Replayed(dl, q, 1)); p.UserId != "" {
		t.Errorf("replay republishes user id %q, want none", p.UserId)
	}
}

// Every property a delivery carries but the user id comes back in the
// publish made of it, so that a republished message is the same message.
func TestPublishingKeepsEveryProperty(t *testing.T) {
	d := amqp.Delivery{Headers: amqp.Table{"k": "v"}, ContentType: "application/json", ContentEncoding: "gzip",
		DeliveryMode: 2, Priority: 3, CorrelationId: "c", ReplyTo: "r", Expiration: "100", MessageId: "m",
		Timestamp: time.Unix(1700000000, 0), Type: "t", UserId: "u", AppId: "a", Body: []byte("b")}
	p := wire.Publishing(wire.Message(&d))
	want := amqp.Publishing{Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: 2, Priority: 3, CorrelationId: "c", ReplyTo: "r", Expiration: "100", MessageId: "m",
		Timestamp: d.Timestamp, Type: "t", AppId: "a", Body: d.Body}
	if fmt.Sprint(p.Publishing) != fmt.Sprint(want) {
		t.Errorf("Publishing(Message(d)) = %+v\nwant %+v", p.Publishing, want)
	}
}
