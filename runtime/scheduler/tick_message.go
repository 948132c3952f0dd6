package scheduler

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/stores"
)

// TickNamespace is the UUID namespace of firings' message ids: a firing's
// id is the UUIDv5 (SHA-1) of TickName(key, tick) in it.
var TickNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://acemq.dev/acemq-flow/schedule-tick"))

// TickName is the name a firing's message id is derived from:
// `<flow>/<schedule>@<tick, RFC 3339 UTC>`.
func TickName(key string, tick time.Time) string { return key + "@" + TickText(tick) }

// TickText is a tick as x-acemq-tick carries it: RFC 3339 UTC, with a
// fraction of a second only when the tick has one.
func TickText(tick time.Time) string { return tick.UTC().Format(time.RFC3339Nano) }

// TickMessageID is the message id of a schedule's firing at tick: the same
// for every replica and every republish, so that a second publish of it is a
// duplicate to an idempotent consumer (FLOW-FORMAT §4).
func TickMessageID(key string, tick time.Time) string {
	return uuid.NewSHA1(TickNamespace, []byte(TickName(key, tick))).String()
}

// TickMessage is the message schedule s sends at tick: the first message of
// a run of its target with its payload (decide.FirstMessage), whose message
// and correlation ids are TickMessageID, first seen and timestamped at the
// tick, from the schedule's flow, with x-acemq-schedule and x-acemq-tick.
// It is pure: every replica builds the same message for a tick.
func TickMessage(p *plan.Plan, s plan.Schedule, tick time.Time) (decide.Message, error) {
	target := decide.Target{Pipeline: s.Send.Pipeline, Itinerary: s.Send.Itinerary, Saga: s.Send.Saga}
	if target == (decide.Target{}) {
		target.Exchange, target.RoutingKey = s.Send.Exchange, s.Send.RoutingKey
	}
	payload := []byte(s.Send.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	m, err := decide.FirstMessage(p, target, payload, tick)
	if err != nil {
		return m, fmt.Errorf("schedule %q (%s): %w", s.Name, s.At, err)
	}
	id := TickMessageID(s.Key(), tick)
	m.MessageID, m.CorrelationID = id, id
	m.Headers[plan.HeaderOrigin] = s.Flow
	m.Headers[plan.HeaderSchedule] = s.Key()
	m.Headers[plan.HeaderTick] = TickText(tick)
	return m, nil
}

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
