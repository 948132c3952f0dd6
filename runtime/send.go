package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/spec"
)

// WireMessage is a message as JSON, for the admin API: `send` without flow
// files asks the running runtime to build the first message of a run.
type WireMessage struct {
	Exchange      string         `json:"exchange"`
	RoutingKey    string         `json:"routing_key"`
	MessageID     string         `json:"message_id"`
	CorrelationID string         `json:"correlation_id"`
	Type          string         `json:"type,omitempty"`
	ContentType   string         `json:"content_type,omitempty"`
	Timestamp     time.Time      `json:"timestamp"`
	Headers       map[string]any `json:"headers"`
	Body          []byte         `json:"body"`
}

// WireMessageOf encodes a message for the admin API.
func WireMessageOf(m broker.Message) WireMessage {
	return WireMessage{Exchange: m.Exchange, RoutingKey: m.RoutingKey, MessageID: m.MessageId, CorrelationID: m.CorrelationId,
		Type: m.Type, ContentType: m.ContentType, Timestamp: m.Timestamp, Headers: m.Headers, Body: m.Body}
}

// Message decodes it; whole numbers in headers come back as int64.
func (w WireMessage) Message() broker.Message {
	h := amqp.Table{}
	for k, v := range w.Headers {
		if f, ok := v.(float64); ok && f == float64(int64(f)) {
			v = int64(f)
		}
		h[k] = v
	}
	return broker.Message{Exchange: w.Exchange, RoutingKey: w.RoutingKey, Publishing: amqp.Publishing{
		MessageId: w.MessageID, CorrelationId: w.CorrelationID, Type: w.Type, ContentType: w.ContentType,
		DeliveryMode: amqp.Persistent, Timestamp: w.Timestamp, Headers: h, Body: w.Body}}
}

// Target says where `send` publishes: the entry of a pipeline or an
// itinerary, or an exchange and routing key.
type Target struct {
	Pipeline   string `json:"pipeline,omitempty"`
	Itinerary  string `json:"itinerary,omitempty"`
	Saga       string `json:"saga,omitempty"`
	Exchange   string `json:"exchange,omitempty"`
	RoutingKey string `json:"routing_key,omitempty"`
}

// FirstMessage builds the first message of a run: a new message id that is
// also the run's correlation id, attempt 1, first-seen now, and the route
// (a pipeline's declared route, or an itinerary's slip holding only the
// stops whose `when` holds for this payload). The payload is checked against
// the entry's input type first.
func FirstMessage(plan *Plan, t Target, payload []byte, now time.Time) (broker.Message, error) {
	id := NewMessageID()
	msg := broker.Message{Publishing: amqp.Publishing{
		MessageId: id, CorrelationId: id, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		Timestamp: now.UTC().Truncate(time.Second), Body: payload,
		Headers: amqp.Table{HeaderAttempt: int64(1), HeaderFirstSeen: FormatTime(now)},
	}}
	switch {
	case t.Pipeline != "":
		p := plan.pipeline(t.Pipeline)
		if p == nil {
			return msg, fmt.Errorf("no pipeline %q in the flows; known: %s", t.Pipeline, plan.names("pipeline"))
		}
		if err := checkInput(p.file, p.Input, payload); err != nil {
			return msg, fmt.Errorf("pipeline %q: %w", p.Name, err)
		}
		msg.Exchange, msg.RoutingKey = p.Exchange, p.Route[0]
		msg.Type = p.Input
		msg.Headers[HeaderRoute] = RouteHeader(p.Route)
		msg.Headers[HeaderRoutePosition] = int64(0)
		msg.Headers[HeaderOrigin] = p.Flow
	case t.Itinerary != "":
		it := plan.itinerary(t.Itinerary)
		if it == nil {
			return msg, fmt.Errorf("no itinerary %q in the flows; known: %s", t.Itinerary, plan.names("itinerary"))
		}
		var decoded any
		if len(payload) > 0 {
			v, err := spec.DecodeJSON(payload)
			if err != nil {
				return msg, fmt.Errorf("itinerary %q: the payload is not JSON: %w", it.Name, err)
			}
			decoded = v
		}
		if it.Input != "" && it.Spec != nil {
			if err := checkInput(it.file, it.Input, payload); err != nil {
				return msg, fmt.Errorf("itinerary %q: %w", it.Name, err)
			}
		}
		slip, err := ItineraryFor(*it, decoded)
		if err != nil {
			return msg, err
		}
		first, ok := slip.Current()
		if !ok {
			return msg, fmt.Errorf("itinerary %q: no stop applies to this payload", it.Name)
		}
		raw, _ := slip.MarshalJSON()
		msg.Exchange, msg.RoutingKey = first.Exchange, first.RoutingKey
		msg.Type = it.Input
		msg.Headers[HeaderSlip] = string(raw)
		msg.Headers[HeaderOrigin] = it.Flow
	case t.Saga != "":
		return msg, fmt.Errorf("saga %q: sagas are %w", t.Saga, ErrUnsupported)
	case t.Exchange != "" || t.RoutingKey != "":
		msg.Exchange, msg.RoutingKey = t.Exchange, t.RoutingKey
		msg.Headers[HeaderOrigin] = "acemq-flow send"
	default:
		return msg, errors.New("say where to send: --pipeline, --itinerary, --saga, or --exchange with --routing-key")
	}
	return msg, nil
}

func checkInput(f *spec.Flow, typ string, payload []byte) error {
	if f == nil || typ == "" {
		return nil
	}
	if err := f.Type(typ).ValidateJSON(payload); err != nil {
		return fmt.Errorf("the payload is not a valid %s: %w", typ, err)
	}
	return nil
}

func (p *Plan) pipeline(name string) *PipelinePlan {
	for i := range p.Pipelines {
		if p.Pipelines[i].Name == name {
			return &p.Pipelines[i]
		}
	}
	return nil
}

func (p *Plan) itinerary(name string) *ItineraryPlan {
	for i := range p.Itineraries {
		if p.Itineraries[i].Name == name {
			return &p.Itineraries[i]
		}
	}
	return nil
}

func (p *Plan) names(kind string) string {
	var out []string
	switch kind {
	case "pipeline":
		for _, x := range p.Pipelines {
			out = append(out, x.Name)
		}
	case "itinerary":
		for _, x := range p.Itineraries {
			out = append(out, x.Name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return fmt.Sprint(out)
}

// Reply is what came back to a `send --wait`.
type Reply struct {
	Outcome   string // completed, stopped, dead-lettered
	Payload   []byte
	Headers   amqp.Table
	StoppedAt string
	Error     string
	Slip      *Itinerary // the run's slip, for an itinerary: how far it got
}

// Route renders the reply's slip for a person ("validate ✓ 14:03:11 →
// approve ✓ 14:03:12 → charge ✓ 14:03:12"), or "" without one.
func (r *Reply) Route() string {
	if r.Slip == nil {
		return ""
	}
	return slipText(*r.Slip)
}

// ErrNoReply is returned by Send when no reply came within the wait.
var ErrNoReply = errors.New("no reply")

// sendClosed is Send's error when the broker closed the channel before it
// confirmed the message: said plainly when the exchange does not exist.
// amqp091-go hands the close to closes before it closes the other notify
// channels.
func sendClosed(closes <-chan *amqp.Error, msg broker.Message) error {
	e := <-closes
	if e != nil && e.Code == amqp.NotFound {
		return fmt.Errorf("exchange %q does not exist on the broker; run the flows that declare it (`acemq-flow run`), or correct the name", msg.Exchange)
	}
	if e != nil {
		return fmt.Errorf("%w: the channel closed before the broker confirmed the message to %q with key %q: %v", broker.ErrIndeterminate, msg.Exchange, msg.RoutingKey, e)
	}
	return fmt.Errorf("%w: the channel closed before the broker confirmed the message to %q with key %q", broker.ErrIndeterminate, msg.Exchange, msg.RoutingKey)
}

// sendOpTimeout bounds each of send's calls to the broker, closing the
// connection included: a broker that reads nothing (a resource alarm)
// answers none of them, and send should not outlast its wait by much.
const sendOpTimeout = 2 * time.Second

// sendConfirmTimeout bounds the wait for the broker's confirm of a send
// without --wait.
const sendConfirmTimeout = 30 * time.Second

// Send publishes msg on its own connection with a confirm, and, when wait
// is positive, waits for the run's reply over direct reply-to (correlated
// by the run's id); wait bounds the whole, from the publish to the reply.
// It returns nil Reply when wait is zero.
func Send(ctx context.Context, url string, msg broker.Message, wait time.Duration) (*Reply, error) {
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := broker.Open(dctx, url, broker.ConnOptions{Name: "acemq-flow send", OpTimeout: sendOpTimeout})
	if err != nil {
		return nil, fmt.Errorf("connect to the broker: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel(dctx)
	if err != nil {
		return nil, fmt.Errorf("open a channel: %w", err)
	}
	// A broker that reads nothing (a resource alarm) never answers the
	// channel's close: closing the connection next ends it.
	defer func() {
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			_ = ch.Close()
		}()
		select {
		case <-closed:
		case <-time.After(time.Second):
		}
	}()
	var replies <-chan amqp.Delivery
	if wait > 0 {
		// Direct reply-to: consume before publishing, on the same channel.
		replies, err = ch.ConsumeWithContext(ctx, "amq.rabbitmq.reply-to", "", true, false, false, false, nil)
		if err != nil {
			return nil, fmt.Errorf("consume direct reply-to: %w", err)
		}
		msg.ReplyTo = "amq.rabbitmq.reply-to"
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("enable confirms: %w", err)
	}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	// The wait runs from the publish: a broker that does not confirm (a
	// resource alarm blocks publishers) must not hold send past it.
	limit := wait
	if limit <= 0 {
		limit = sendConfirmTimeout
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	if err := ch.PublishWithContext(ctx, msg.Exchange, msg.RoutingKey, true, false, msg.Publishing); err != nil {
		return nil, fmt.Errorf("publish to %q with key %q: %w", msg.Exchange, msg.RoutingKey, err)
	}
	var returned bool
	select {
	case _, ok := <-returns:
		if !ok {
			return nil, sendClosed(closes, msg)
		}
		returned = true
		<-confirms
	case c, ok := <-confirms:
		if !ok {
			return nil, sendClosed(closes, msg)
		}
		if !c.Ack {
			return nil, fmt.Errorf("the broker refused the message (nack) on %q with key %q", msg.Exchange, msg.RoutingKey)
		}
		select {
		case <-returns:
			returned = true
		default:
		}
	case <-timer.C:
		return nil, fmt.Errorf("%w: the broker did not confirm message %s to %q with key %q within %s (a resource alarm blocks publishers until it clears); it may yet be delivered",
			broker.ErrIndeterminate, msg.MessageId, msg.Exchange, msg.RoutingKey, limit)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if returned {
		return nil, fmt.Errorf("%w: exchange %q has no queue bound for key %q; is the runtime running with these flows?", broker.ErrUnroutable, msg.Exchange, msg.RoutingKey)
	}
	if wait <= 0 {
		return nil, nil
	}
	for {
		select {
		case d, ok := <-replies:
			if !ok {
				return nil, errors.New("the reply channel closed")
			}
			if d.CorrelationId != msg.CorrelationId {
				continue
			}
			r := &Reply{Outcome: strHeader(d.Headers[HeaderOutcome]), Payload: d.Body, Headers: d.Headers,
				StoppedAt: strHeader(d.Headers[HeaderStoppedAt]), Error: strHeader(d.Headers[HeaderError])}
			if raw := strHeader(d.Headers[HeaderSlip]); raw != "" {
				if it, err := ParseItinerary([]byte(raw)); err == nil {
					r.Slip = &it
				}
			}
			return r, nil
		case <-timer.C:
			return nil, fmt.Errorf("%w within %s for message %s", ErrNoReply, wait, msg.MessageId)
		case <-ctx.Done():
			// The message went out: say which, so that it can be followed.
			return nil, fmt.Errorf("message %s was sent, and the wait for its reply was interrupted: %w", msg.MessageId, ctx.Err())
		}
	}
}
