package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/wire"
)

// PreviewBytes is how much of a payload Inspect shows; nothing beyond it
// leaves the broker's message in a view.
const PreviewBytes = 200

// QueueView is what Inspect reports about a queue.
type QueueView struct {
	Queue string `json:"queue"`
	// Depth is the number of ready messages when Inspect started.
	Depth    int           `json:"depth"`
	Messages []MessageView `json:"messages"`
}

// MessageView is a readable view of one message: its envelope, why it
// failed, where it is on its route, and the start of its payload. It holds
// no other header and no more than PreviewBytes of the payload.
type MessageView struct {
	MessageID     string `json:"message_id"`
	CorrelationID string `json:"correlation_id,omitempty"`
	Type          string `json:"type,omitempty"`
	ContentType   string `json:"content_type,omitempty"`
	Timestamp     string `json:"timestamp,omitempty"` // RFC 3339 UTC
	Redelivered   bool   `json:"redelivered,omitempty"`
	// Deliveries is the broker's x-delivery-count: how many times a quorum
	// queue has handed the message out and had it back (inspects
	// included). At the queue's x-delivery-limit (20 on the runtime's step
	// queues) its next return dead-letters it.
	Deliveries int `json:"deliveries,omitempty"`
	Attempt    int `json:"attempt"`
	Replays    int `json:"replays"`
	// ErrorKind and Error are the x-acemq-error-kind and x-acemq-error
	// headers: why the runtime dead-lettered it.
	ErrorKind string `json:"error_kind,omitempty"`
	Error     string `json:"error,omitempty"`
	// FailedQueue and FailedAt say where and when it failed: the
	// x-acemq-failed-* headers, or the broker's x-death record for a message
	// the broker dead-lettered itself.
	FailedQueue string `json:"failed_queue,omitempty"`
	FailedAt    string `json:"failed_at,omitempty"`
	// DeathReason is the broker's reason (rejected, expired, maxlen,
	// delivery_limit) for a message the broker dead-lettered.
	DeathReason string `json:"death_reason,omitempty"`
	// Route and RoutePosition are the declared route, and the 0-based
	// index of the step the message is addressed to (nil without a route);
	// RouteText writes them as "validate,[reserve],dispatch".
	Route         []string `json:"route,omitempty"`
	RoutePosition *int     `json:"route_position,omitempty"`
	RouteText     string   `json:"route_text,omitempty"`
	// Slip is the carried itinerary as it travels; SlipText writes it as
	// "validate ✓ 14:03:11 → [charge] → ship" (times UTC). SlipError says
	// why a slip header could not be read.
	// DueAt, DeliverExchange and DeliverRoutingKey are a delayed message's
	// x-acemq-due-at and destination (FLOW-FORMAT §4), DueRetries how many
	// times it was due and reached no queue there (x-acemq-due-retries).
	DueAt             string          `json:"due_at,omitempty"`
	DeliverExchange   string          `json:"deliver_exchange,omitempty"`
	DeliverRoutingKey string          `json:"deliver_routing_key,omitempty"`
	Delayed           bool            `json:"delayed,omitempty"`
	DueRetries        int             `json:"due_retries,omitempty"`
	Slip              json.RawMessage `json:"slip,omitempty"`
	SlipText          string          `json:"slip_text,omitempty"`
	SlipError         string          `json:"slip_error,omitempty"`
	// ClaimCheck is a claim-checked message's reference (FLOW-FORMAT §6),
	// read from the message without fetching the blob: the blob's key and
	// the payload's size and content type. ClaimCheckError says why a
	// message framed as a reference cannot be read (the runtime
	// dead-letters such a message with that reason).
	ClaimCheck      *ClaimCheckView `json:"claim_check,omitempty"`
	ClaimCheckError string          `json:"claim_check_error,omitempty"`
	// Avro is set for a message in the Avro framing (FLOW-FORMAT §6) when
	// Inspect was given a Decoder (InspectOptions): its writer's schema id
	// and whether Preview shows it decoded to JSON.
	Avro *AvroView `json:"avro,omitempty"`
	// Size is the payload's length in bytes; Preview its first
	// PreviewBytes, with bytes that are not printable text escaped (\n,
	// \x00, \u200b); Truncated says the payload goes on. For an Avro
	// message, Preview is the start of its JSON, or of its bytes in hex
	// when it could not be decoded.
	Size      int    `json:"size"`
	Preview   string `json:"preview"`
	Truncated bool   `json:"truncated,omitempty"`
}

// AvroView says how Inspect read a message in the Avro framing: SchemaID
// is the writer's schema id its frame names (0 when the frame cannot be
// read); Decoded is true when Preview is the body as JSON, decoded by that
// schema; otherwise Preview is a hex dump of the body's first bytes and
// Note says why it was not decoded (the registry not reached, an unknown
// id, data that does not read).
type AvroView struct {
	SchemaID int    `json:"schema_id,omitempty"`
	Decoded  bool   `json:"decoded"`
	Note     string `json:"note,omitempty"`
}

// A Decoder reads, for a view, a body the broker holds in a binary
// encoding: `inspect` passes one that reads the Avro framing by the
// schema registry (runtime/codec). It is used from one goroutine.
type Decoder interface {
	// Framed reports whether a message of content type ct with body is in
	// the decoder's framing, and the writer's schema id the frame names
	// (0 when the frame cannot be read).
	Framed(ct string, body []byte) (id int, ok bool)
	// Decode returns body as JSON text, or an error that says, as a
	// sentence, why it cannot.
	Decode(ctx context.Context, body []byte) ([]byte, error)
}

// InspectOptions change what InspectWith shows of the messages.
type InspectOptions struct {
	// Decoder, when set, shows the messages in its framing decoded to
	// JSON, or when that fails in hex with the reason (MessageView.Avro).
	Decoder Decoder
}

// ClaimCheckView is the reference a claim-checked message carries: the key
// of its payload in the blob store, and the payload's size in bytes and
// content type.
type ClaimCheckView struct {
	Key         string `json:"key"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type,omitempty"`
}

// Inspect reports queue's depth and a view of its first limit messages
// (FLOW-FORMAT §3, `inspect`) without losing any: it takes each with
// basic.get, holds them unacknowledged, and puts them all back with
// basic.nack and requeue when it is done, also when it fails or ctx ends.
// It reads at most the messages queue held when it started.
//
// A classic queue puts requeued messages back where they were, so the order
// does not change; `.dlq` and `.parked` are classic queues. On a quorum
// queue every requeue counts as a delivery: each message looked at gets
// x-delivery-count + 1, and one inspected often enough reaches the queue's
// x-delivery-limit and is dead-lettered on its next delivery.
//
// Inspect opens its own connection to url and closes it before it returns.
func Inspect(ctx context.Context, url, queue string, limit int) (QueueView, error) {
	return InspectWith(ctx, url, queue, limit, InspectOptions{})
}

// InspectWith is Inspect with opts: with opts.Decoder, Avro messages are
// shown as JSON.
func InspectWith(ctx context.Context, url, queue string, limit int, opts InspectOptions) (QueueView, error) {
	view := QueueView{Queue: queue, Messages: []MessageView{}}
	if limit < 0 {
		return view, fmt.Errorf("inspect queue %q: the limit must not be negative, not %d", queue, limit)
	}
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := broker.Open(octx, url, broker.ConnOptions{Name: "acemq-flow inspect"})
	if err != nil {
		return view, fmt.Errorf("inspect queue %q: connect to the broker: %w", queue, err)
	}
	defer conn.Close()
	top := broker.NewTopology(conn, nil)
	defer top.Close()
	view, err = inspectOn(ctx, top, queue, limit, opts.Decoder)
	if errors.Is(err, broker.ErrNotFound) {
		return view, queueError("inspect", queue, err)
	}
	return view, err
}

// viewMessage builds the readable view of one delivery, its body read by
// dec when it is in dec's framing (dec may be nil).
func viewMessage(ctx context.Context, d amqp.Delivery, dec Decoder) MessageView {
	m := wire.Message(&d)
	env := decide.ReadEnvelope(m)
	v := MessageView{
		MessageID:     env.MessageID,
		CorrelationID: env.CorrelationID,
		Type:          env.Type,
		ContentType:   env.ContentType,
		Redelivered:   d.Redelivered,
		Attempt:       env.Attempt,
		Replays:       env.Replays,
		ErrorKind:     decide.HeaderText(d.Headers[plan.HeaderErrorKind]),
		Error:         decide.HeaderText(d.Headers[plan.HeaderError]),
		FailedQueue:   decide.HeaderText(d.Headers[plan.HeaderFailedQueue]),
		FailedAt:      decide.HeaderText(d.Headers[plan.HeaderFailedAt]),
		Size:          len(d.Body),
	}
	if ex, key, _, ok := decide.Destination(decide.Table(d.Headers)); ok {
		v.Delayed, v.DeliverExchange, v.DeliverRoutingKey = true, ex, key
		v.DueAt = decide.HeaderText(d.Headers[plan.HeaderDueAt])
		v.DueRetries, _ = decide.HeaderInt(d.Headers[plan.HeaderDueRetries])
	}
	if n, ok := decide.HeaderInt(d.Headers["x-delivery-count"]); ok {
		v.Deliveries = n
	}
	if !env.Timestamp.IsZero() {
		v.Timestamp = decide.FormatTime(env.Timestamp)
	}
	if q, reason, at, ok := firstDeath(d.Headers); ok {
		v.DeathReason = reason
		if v.FailedQueue == "" {
			v.FailedQueue = q
		}
		if v.FailedAt == "" && !at.IsZero() {
			v.FailedAt = decide.FormatTime(at)
		}
	}
	if env.Route != nil {
		pos := env.RoutePosition
		v.Route, v.RoutePosition = env.Route, &pos
		v.RouteText = decide.RouteText(env.Route, env.RoutePosition)
	}
	switch {
	case env.Slip != nil:
		raw, _ := env.Slip.MarshalJSON()
		v.Slip = raw
		v.SlipText = env.Slip.Text()
	case env.SlipErr != nil:
		v.SlipError = env.SlipErr.Error()
	}
	if ref, ok, err := decide.ReadClaimCheck(m); err != nil {
		v.ClaimCheckError = err.Error()
	} else if ok {
		v.ClaimCheck = &ClaimCheckView{Key: ref.Key, Size: ref.Size, ContentType: ref.ContentType}
	}
	v.Preview, v.Truncated = Preview(d.Body, PreviewBytes)
	if dec == nil {
		return v
	}
	if id, ok := dec.Framed(d.ContentType, d.Body); ok {
		v.Avro = &AvroView{SchemaID: id}
		js, err := dec.Decode(ctx, d.Body)
		if err == nil {
			v.Avro.Decoded = true
			v.Preview, v.Truncated = Preview(js, PreviewBytes)
		} else {
			v.Avro.Note = err.Error()
			v.Preview, v.Truncated = HexPreview(d.Body, PreviewBytes)
		}
	}
	return v
}

// HexPreview returns as much of body as max characters hold in hex, two
// digits a byte and a space between bytes, and reports whether body goes
// on beyond that.
func HexPreview(body []byte, max int) (string, bool) {
	n := min(len(body), (max+1)/3)
	var sb strings.Builder
	for i, c := range body[:n] {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02x", c)
	}
	return sb.String(), n < len(body)
}

// firstDeath reads the broker's most recent dead-lettering from x-death.
func firstDeath(h amqp.Table) (queue, reason string, at time.Time, ok bool) {
	deaths, _ := h["x-death"].([]any)
	if len(deaths) == 0 {
		return "", "", time.Time{}, false
	}
	d, _ := deaths[0].(amqp.Table)
	if d == nil {
		return "", "", time.Time{}, false
	}
	at, _ = d["time"].(time.Time)
	return decide.HeaderText(d["queue"]), decide.HeaderText(d["reason"]), at, true
}

// Preview returns the first max bytes of body as text, escaping what is not
// printable: \n, \r and \t, \xNN for a byte that is not UTF-8 (a rune cut at
// the limit included), \uNNNN for a control or invisible character. It
// reports whether body is longer than max.
func Preview(body []byte, max int) (string, bool) {
	b, cut := body, false
	if len(b) > max {
		b, cut = b[:max], true
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&sb, `\x%02x`, b[0])
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\r':
			sb.WriteString(`\r`)
		case r == '\t':
			sb.WriteString(`\t`)
		case r == ' ' || unicode.IsPrint(r):
			sb.WriteRune(r)
		case r < 0x10000:
			fmt.Fprintf(&sb, `\u%04x`, r)
		default:
			fmt.Fprintf(&sb, `\U%08x`, r)
		}
		b = b[size:]
	}
	return sb.String(), cut
}

// isLadderLevel reports whether queue is one of the delay ladder's levels.
func isLadderLevel(queue string) bool {
	for k := range plan.LadderLevels {
		if queue == plan.LadderQueue(k) {
			return true
		}
	}
	return false
}
