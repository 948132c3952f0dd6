package scheduler

import (
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/stores"
)

// TickText is decide.TickText, for the schedules' views in this package
// and their callers.
func TickText(tick time.Time) string { return decide.TickText(tick) }

// OutboxRecord is the outbox record that publishes m as it is: its body,
// properties and headers.
func OutboxRecord(m decide.Message) stores.OutboxRecord {
	var ts int64
	if !m.Timestamp.IsZero() {
		ts = m.Timestamp.Unix()
	}
	return stores.OutboxRecord{
		Exchange: m.Exchange, RoutingKey: m.RoutingKey, Body: m.Body, ContentType: m.ContentType,
		Properties: stores.Properties{
			MessageID: m.MessageID, CorrelationID: m.CorrelationID, ReplyTo: m.ReplyTo, Type: m.Type, AppID: m.AppID,
			ContentEncoding: m.ContentEncoding, Expiration: m.Expiration, Priority: m.Priority, DeliveryMode: m.DeliveryMode,
			Timestamp: ts, Headers: map[string]any(m.Headers),
		},
	}
}
