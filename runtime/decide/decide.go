package decide

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// What happens to one delivery is decided here, by pure functions of the
// plan entry, the delivery and the handler's outcome (DESIGN.md, one-way data
// flow). The consumer carries the decision out: it publishes Decision.Publish
// with confirms, then acknowledges.

// Outcome names, as counted and as metric labels (FLOW-FORMAT §2).
const (
	OutcomeAcknowledged = "acknowledged"
	OutcomeStopped      = "stopped"
	OutcomeRetried      = "retried"
	OutcomeDeadLettered = "dead_lettered"
	OutcomeDuplicate    = "duplicate"
	OutcomeInProgress   = "in_progress"
)

// Error kinds of dead-lettered messages.
const (
	KindFatal     = "fatal"
	KindExhausted = "exhausted"
)

// Result is what a handler returned: a payload, or nothing (Stop: the step
// stops the run — a decision, not a failure).
type Result struct {
	Stop    bool
	Payload []byte
}

// ErrFatal marks a failure that no retry can fix: the message goes straight
// to .dlq. Handlers wrap it (or a plugin reports a fatal failure).
var ErrFatal = errors.New("fatal")

// Inbound is one delivery as the decisions see it.
type Inbound struct {
	Env   Envelope
	Body  []byte
	Props Message // the delivery's properties, to republish unchanged
	// Typed says Body is known to fit the consumer's input type: the
	// engine's codec decoded it from Avro by that very type, so Precheck
	// does not parse and check it again.
	Typed bool
}

// InboundOf reads the envelope of a delivered message m.
func InboundOf(m Message) Inbound {
	return Inbound{Env: ReadEnvelope(m), Body: m.Body, Props: m}
}

// Publish is one message a decision sends. Every publish must be confirmed
// and routed before the delivery is acknowledged, but for a BestEffort one
// (a reply, whose requester may be gone): it is sent once the others are,
// and its failure is logged and holds nothing back.
type Publish struct {
	Message
	BestEffort bool
}

// Decision is what to do with one delivery: publish these, then
// acknowledge. Outcome is counted; Reason is logged.
type Decision struct {
	Outcome string
	Publish []Publish
	Reason  string
	Rung    string // the retry queue, when retried
	Parked  bool   // a dead-letter sent to .parked, .dlq having refused it
}

// Precheck decides, before the handler runs, whether a delivery can be
// handled at all: a slip that cannot be parsed or a payload that does not
// match the input type is fatal (dead-lettered at once, never retried). It
// returns nil when the handler should run.
func Precheck(c *plan.Consumer, in Inbound, now time.Time) *Decision {
	if in.Env.SlipErr != nil {
		d := DeadLetter(c, in, KindFatal, in.Env.SlipErr.Error(), now)
		return &d
	}
	if in.Typed {
		return nil
	}
	if err := inputType(c).ValidateJSON(in.Body); err != nil {
		d := DeadLetter(c, in, KindFatal, err.Error(), now)
		return &d
	}
	return nil
}

func inputType(c *plan.Consumer) *spec.Type {
	if c.File == nil || c.Input == "" {
		return nil
	}
	return c.File.Type(c.Input)
}

func outputType(c *plan.Consumer) *spec.Type {
	if c.File == nil || c.Output == "" || c.Output == spec.OutputNone {
		return nil
	}
	return c.File.Type(c.Output)
}

// Decide works out what happens after the handler ran: where the result
// goes (the carried slip first, then the declared route, then reply_to),
// or, for a failure, the retry rung or .dlq. route is the declared route of
// the consumer's pipeline (nil for a plain consumer); jitter is a number in
// [0,1) drawn by the caller.
func Decide(c *plan.Consumer, route []string, in Inbound, res Result, callErr error, now time.Time, jitter float64) Decision {
	if callErr != nil {
		if errors.Is(callErr, ErrFatal) {
			return DeadLetter(c, in, KindFatal, callErr.Error(), now)
		}
		return Retry(c, in, callErr, now, jitter)
	}
	if !res.Stop {
		if typ := outputType(c); typ != nil {
			if err := typ.ValidateJSON(res.Payload); err != nil {
				return DeadLetter(c, in, KindFatal, "output: "+err.Error(), now)
			}
		}
	}
	env := in.Env

	// A carried itinerary wins over a declared route.
	if env.Slip != nil {
		slip := env.Slip.Advance(now)
		here := stepName(c, env)
		next, more := slip.Current()
		if res.Stop && more {
			return stopped(c, in, here, slip, now)
		}
		if !more {
			return completed(c, in, res, slip, now)
		}
		msg := output(c, in, res.Payload, now)
		raw, _ := slip.MarshalJSON()
		msg.Headers[plan.HeaderSlip] = string(raw)
		msg.Exchange, msg.RoutingKey = next.Exchange, next.RoutingKey
		return Decision{Outcome: OutcomeAcknowledged, Publish: []Publish{{Message: msg}}}
	}

	// The declared route: the headers, or for a message from a client that
	// is not ours, the pipeline from this step on.
	if c.Kind == plan.KindStep {
		r, pos := env.Route, env.RoutePosition
		carried := true // the route header travels on unchanged
		if len(r) == 0 || pos < 0 || pos >= len(r) || r[pos] != c.Step {
			r, pos, carried = route, c.Position, false
		}
		if pos+1 < len(r) {
			if res.Stop {
				return stopped(c, in, c.Step, Itinerary{}, now)
			}
			msg := output(c, in, res.Payload, now)
			if carried {
				msg.Headers[plan.HeaderRoute] = HeaderText(env.Headers[plan.HeaderRoute])
			} else {
				msg.Headers[plan.HeaderRoute] = plan.RouteHeader(r)
			}
			msg.Headers[plan.HeaderRoutePosition] = int64(pos + 1)
			msg.Exchange, msg.RoutingKey = plan.PipelineExchange(c.Pipeline), r[pos+1]
			return Decision{Outcome: OutcomeAcknowledged, Publish: []Publish{{Message: msg}}}
		}
	}
	return completed(c, in, res, Itinerary{}, now)
}

// stepName is the name this consumer goes by in the run: the slip's
// current stop, or the pipeline step, or the consumer id.
func stepName(c *plan.Consumer, env Envelope) string {
	if env.Slip != nil {
		if cur, ok := env.Slip.Current(); ok && cur.Name != "" {
			return cur.Name
		}
	}
	if c.Step != "" {
		return c.Step
	}
	return c.ID
}

// output builds the message a step's result becomes: a new message id, the
// run's correlation id, the consumed message as its cause, first-seen,
// origin and reply_to carried over (FLOW-FORMAT §2).
func output(c *plan.Consumer, in Inbound, payload []byte, now time.Time) Message {
	env := in.Env
	firstSeen := env.FirstSeen
	if firstSeen.IsZero() {
		firstSeen = env.Timestamp
	}
	if firstSeen.IsZero() {
		firstSeen = now
	}
	origin := env.Origin
	if origin == "" {
		origin = c.Flow
	}
	typ := c.Output
	if typ == spec.OutputNone {
		typ = ""
	}
	id := NewMessageID()
	if c.Idempotent {
		// The same input gives the same output id, so that an output
		// published twice (a crash after the publish, before the claim was
		// confirmed) is absorbed by the next idempotent consumer.
		id = DerivedMessageID(c.ID, env.MessageID)
	}
	return Message{
		MessageID:     id,
		CorrelationID: RunID(env),
		ReplyTo:       env.ReplyTo,
		Type:          typ,
		ContentType:   "application/json",
		DeliveryMode:  Persistent,
		Timestamp:     now.UTC().Truncate(time.Second),
		Body:          payload,
		Headers: Table{
			plan.HeaderAttempt:     int64(1),
			plan.HeaderCausationID: env.MessageID,
			plan.HeaderFirstSeen:   FormatTime(firstSeen),
			plan.HeaderOrigin:      origin,
		},
	}
}

// RunID is the run's correlation id: the first message's id when the
// client set none.
func RunID(env Envelope) string {
	if env.CorrelationID != "" {
		return env.CorrelationID
	}
	return env.MessageID
}

func completed(c *plan.Consumer, in Inbound, res Result, slip Itinerary, now time.Time) Decision {
	d := Decision{Outcome: OutcomeAcknowledged}
	if in.Env.ReplyTo != "" {
		body := res.Payload
		if res.Stop || c.Output == spec.OutputNone {
			// FLOW-FORMAT §2: empty after `output: none`, whatever the
			// handler returned.
			body = nil
		}
		d.Publish = append(d.Publish, reply(c, in, "completed", body, nil, slip, now))
	}
	return d
}

func stopped(c *plan.Consumer, in Inbound, at string, slip Itinerary, now time.Time) Decision {
	d := Decision{Outcome: OutcomeStopped, Reason: "the handler returned nothing at " + at}
	if in.Env.ReplyTo != "" {
		d.Publish = append(d.Publish, reply(c, in, "stopped", nil, Table{plan.HeaderStoppedAt: at}, slip, now))
	}
	return d
}

// reply builds the message a run's end sends to reply_to, with the run's
// correlation id and x-acemq-outcome.
func reply(c *plan.Consumer, in Inbound, outcome string, body []byte, extra Table, slip Itinerary, now time.Time) Publish {
	h := Table{plan.HeaderOutcome: outcome, plan.HeaderCausationID: in.Env.MessageID}
	maps.Copy(h, extra)
	if len(slip.done) > 0 || len(slip.steps) > 0 {
		raw, _ := slip.MarshalJSON()
		h[plan.HeaderSlip] = string(raw)
	}
	return Publish{BestEffort: true, Message: Message{
		Exchange:      "",
		RoutingKey:    in.Env.ReplyTo,
		NotMandatory:  strings.HasPrefix(in.Env.ReplyTo, "amq.rabbitmq.reply-to"),
		MessageID:     NewMessageID(),
		CorrelationID: RunID(in.Env),
		ContentType:   "application/json",
		Timestamp:     now.UTC().Truncate(time.Second),
		Body:          body,
		Headers:       h,
	}}
}

// Retry republishes the message, envelope unchanged but for the attempt,
// to the rung for the attempt that failed; past the last rung, .dlq.
func Retry(c *plan.Consumer, in Inbound, err error, now time.Time, jitter float64) Decision {
	rung, ok := c.Retry.RungFor(in.Env.Attempt)
	if !ok {
		return DeadLetter(c, in, KindExhausted, fmt.Sprintf("attempt %d of %d failed: %v", in.Env.Attempt, c.Retry.MaxAttempts, err), now)
	}
	p := in.Props
	p.Headers = copyTable(p.Headers)
	DropDeaths(p.Headers)
	p.Headers[plan.HeaderAttempt] = int64(in.Env.Attempt + 1)
	p.DeliveryMode = Persistent // a classic rung keeps it over a restart
	if c.Retry.Jitter > 0 {
		// Jitter shortens the wait, as the message's own expiration; the
		// rung's queue TTL stays the upper bound.
		d := time.Duration(float64(rung.Delay) * (1 - c.Retry.Jitter*jitter))
		p.Expiration = strconv.FormatInt(max(d.Milliseconds(), 1), 10)
	} else {
		p.Expiration = ""
	}
	return Decision{
		Outcome: OutcomeRetried,
		Rung:    rung.Queue,
		Reason:  err.Error(),
		Publish: []Publish{{Message: to("", rung.Queue, p)}},
	}
}

// InProgress republishes an idempotent delivery whose claim is held
// elsewhere through the 1s rung, envelope unchanged: no attempt spent,
// never dead-lettered (patterns.txt, "A claim in progress is not a
// duplicate").
func InProgress(c *plan.Consumer, in Inbound) Decision {
	p := in.Props
	p.Headers = copyTable(p.Headers)
	DropDeaths(p.Headers)
	p.Expiration = ""
	p.DeliveryMode = Persistent
	q := plan.RetryQueue(c.Queue, plan.InProgressDelay)
	return Decision{Outcome: OutcomeInProgress, Rung: q,
		Publish: []Publish{{Message: to("", q, p)}}}
}

// DeadLetter sends the message, unchanged but for the error headers, to
// <queue>.dlq, and tells the requester when there is one.
func DeadLetter(c *plan.Consumer, in Inbound, kind, reason string, now time.Time) Decision {
	p := in.Props
	p.Headers = copyTable(p.Headers)
	p.Headers[plan.HeaderError] = reason
	p.Headers[plan.HeaderErrorKind] = kind
	p.Headers[plan.HeaderFailedQueue] = c.Queue
	p.Headers[plan.HeaderFailedAt] = FormatTime(now)
	p.Headers[plan.HeaderAttempt] = int64(in.Env.Attempt)
	p.Expiration = ""
	// Kept until someone looks: persistent whatever the sender chose.
	p.DeliveryMode = Persistent
	d := Decision{Outcome: OutcomeDeadLettered, Reason: reason,
		Publish: []Publish{{Message: to("", plan.DeadLetterQueue(c.Queue), p)}}}
	if in.Env.ReplyTo != "" {
		// The slip as it arrived: how far the run got.
		var slip Itinerary
		if in.Env.Slip != nil {
			slip = *in.Env.Slip
		}
		d.Publish = append(d.Publish, reply(c, in, "dead-lettered", in.Body,
			Table{plan.HeaderError: reason, plan.HeaderErrorKind: kind, plan.HeaderFailedQueue: c.Queue, plan.HeaderFailedAt: FormatTime(now)}, slip, now))
	}
	return d
}

// Park sends the message of dead-letter dec, which .dlq refused (err), to
// <queue>.parked instead, its reason telling both. The reply, if any, goes
// as it would have.
func Park(c *plan.Consumer, dec Decision, err error) Decision {
	pk := Decision{Outcome: OutcomeDeadLettered, Parked: true,
		Reason: fmt.Sprintf("%s; not dead-lettered: %s refused it: %v", dec.Reason, plan.DeadLetterQueue(c.Queue), err)}
	for _, p := range dec.Publish {
		if !p.BestEffort {
			p.Headers = copyTable(p.Headers)
			p.Headers[plan.HeaderError] = pk.Reason
			p.RoutingKey = plan.ParkedQueue(c.Queue)
		}
		pk.Publish = append(pk.Publish, p)
	}
	return pk
}

// DropDeaths removes the broker's dead-letter history from headers h of a
// message the runtime sends back towards a queue it was dead-lettered from
// (a retry rung that expires into the queue, a replay). RabbitMQ drops,
// silently, a message whose x-death shows it already died in the queue it
// is now dead-lettered to, for any reason but a rejection: its cycle
// check. A republished message is a new message to the broker; attempts
// are counted in x-acemq-attempt, never in x-death.
func DropDeaths(h Table) {
	for k := range h {
		if k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			delete(h, k)
		}
	}
}

func copyTable(t Table) Table {
	out := make(Table, len(t)+4)
	maps.Copy(out, t)
	return out
}

// to is m addressed to exchange and routingKey.
func to(exchange, routingKey string, m Message) Message {
	m.Exchange, m.RoutingKey = exchange, routingKey
	return m
}
