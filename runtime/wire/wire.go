// Package wire carries messages between the decisions and the broker: it
// reads a delivery into the message type of runtime/decide and turns a
// decided message into a broker publish. The engine and the operator tools
// use it, so that decide itself knows no broker.
package wire

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
)

// Message is delivery d as the decisions see it, sharing its headers table
// and body. The user id is left out: the broker refuses a publish whose
// user id is not the publishing connection's user (and closes the
// channel), and it is not part of the envelope.
func Message(d *amqp.Delivery) decide.Message {
	return decide.Message{
		Exchange: d.Exchange, RoutingKey: d.RoutingKey,
		MessageID: d.MessageId, CorrelationID: d.CorrelationId, ReplyTo: d.ReplyTo, Type: d.Type,
		ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, Expiration: d.Expiration, AppID: d.AppId,
		DeliveryMode: d.DeliveryMode, Priority: d.Priority, Timestamp: d.Timestamp,
		Headers: decide.Table(d.Headers), Body: d.Body,
	}
}

// Publishing is m as the broker publishes it, sharing its headers table
// and body.
func Publishing(m decide.Message) broker.Message {
	return broker.Message{Exchange: m.Exchange, RoutingKey: m.RoutingKey, NotMandatory: m.NotMandatory,
		Publishing: amqp.Publishing{
			Headers: amqp.Table(m.Headers), ContentType: m.ContentType, ContentEncoding: m.ContentEncoding,
			DeliveryMode: m.DeliveryMode, Priority: m.Priority, CorrelationId: m.CorrelationID, ReplyTo: m.ReplyTo,
			Expiration: m.Expiration, MessageId: m.MessageID, Timestamp: m.Timestamp, Type: m.Type, AppId: m.AppID,
			Body: m.Body,
		}}
}
