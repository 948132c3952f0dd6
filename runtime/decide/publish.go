package decide

import (
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// MissingExchange dead-letters a delivery to consumer c whose result goes
// to an exchange that does not exist (a routing slip's next stop, say),
// naming it and, when known, the routing key.
func MissingExchange(c *plan.Consumer, in Inbound, exchange, routingKey string, now time.Time) Decision {
	key := ""
	if routingKey != "" {
		key = fmt.Sprintf(" (routing key %q)", routingKey)
	}
	return DeadLetter(c, in, KindFatal,
		fmt.Sprintf("exchange %q, where the result goes next%s, does not exist on the broker; declare it, or correct the routing slip", exchange, key), now)
}

// Why the broker refused a decision's own publish (PublishFailure.Kind).
const (
	PublishUnroutable = "unroutable"  // routed to no queue
	PublishNoExchange = "no-exchange" // its exchange does not exist
	PublishNacked     = "nacked"      // basic.nack: a full queue that rejects publishes, say
	PublishInvalid    = "invalid"     // AMQP cannot carry it (a field over 255 bytes)
)

// PublishFailure is the broker's refusal of one of a decision's own
// publishes (not a reply's): Kind says why, Exchange names the exchange
// that does not exist for PublishNoExchange, Err is the broker's error.
type PublishFailure struct {
	Kind     string
	Exchange string
	Err      error
}

// Fallback is what a delivery does once its decision's own publish was
// refused: Decision, carried out instead; or, when Again, the same
// decision published again after RepublishBackoff, the delivery held
// meanwhile; or, when Hold, nothing: nothing takes the message, which goes
// back to its queue after a wait (requeued at once, it would come straight
// back and fail the same way). Event says what happened, for the log.
type Fallback struct {
	Decision Decision
	Again    bool
	Hold     bool
	Event    string
}

// The waits between publishes of a decision the broker nacked: the first
// again after RepublishFirst, each next one twice as late, at most every
// RepublishMax.
const (
	RepublishFirst = 500 * time.Millisecond
	RepublishMax   = 10 * time.Second
)

// RepublishBackoff is how long a delivery whose decision the broker nacked
// failed times (from 1) waits before it publishes the decision again:
// 0.5 s, 1 s, 2 s, … up to 10 s, each stretched by up to a quarter by
// jitter, a number in [0,1) drawn by the caller, so that the deliveries
// held together do not all publish again at once.
func RepublishBackoff(failed int, jitter float64) time.Duration {
	d := RepublishFirst
	for range min(max(failed-1, 0), 5) {
		d *= 2
	}
	d = min(d, RepublishMax)
	return d + time.Duration(float64(d)*jitter/4)
}

// PublishFailed decides what a delivery to consumer c does when the broker
// refused a publish of its decision dec (f). A publish the broker nacked
// (an internal error in a queue's process, a queue at its length limit
// that rejects publishes, a quorum queue without a leader) says nothing
// about the message: whatever the decision, it is published again, as it
// is, after a wait (Again), the handler not called again and no attempt
// spent, so that a broker's trouble, or a full queue downstream, holds the
// consumer back instead of dead-lettering messages nothing was wrong with
// once it outlasts the retry ladder. Otherwise: a dead letter .dlq refuses
// is parked in .parked with both reasons; one .parked refuses too, and an
// in-progress or held delivery whose rung refuses it (never
// dead-lettered), are held. A retry its rung refuses is dead-lettered. A
// result with no exchange or no route, or that AMQP cannot carry, is fatal
// for the message (it would fail the same way next time): dead-lettered
// with the reason.
func PublishFailed(c *plan.Consumer, in Inbound, dec Decision, f PublishFailure, now time.Time) Fallback {
	switch {
	case f.Kind == PublishNacked:
		return Fallback{Again: true, Decision: dec, Event: "the broker refused the publish (basic.nack); it is published again after a wait, no attempt spent"}
	case dec.Outcome == OutcomeDeadLettered && !dec.Parked:
		return Fallback{Decision: Park(c, dec, f.Err), Event: "dead-letter queue refused the message; parking it"}
	case dec.Outcome == OutcomeDeadLettered || dec.Outcome == OutcomeInProgress || dec.Outcome == OutcomeHeld:
		return Fallback{Hold: true, Event: "message could be neither dead-lettered nor parked nor delayed; it goes back to its queue after a wait"}
	case dec.Outcome == OutcomeRetried:
		return Fallback{Event: "retry rung refused the message; dead-lettering it",
			Decision: DeadLetter(c, in, KindFatal, fmt.Sprintf("%s; it could not be retried: %s refused it: %v", dec.Reason, dec.Rung, f.Err), now)}
	case f.Kind == PublishNoExchange:
		return Fallback{Event: "the result's exchange does not exist; dead-lettering the message",
			Decision: MissingExchange(c, in, f.Exchange, "", now)}
	case f.Kind == PublishInvalid:
		return Fallback{Event: "result cannot be published; dead-lettering the message",
			Decision: DeadLetter(c, in, KindFatal, "the result could not be published: "+f.Err.Error(), now)}
	}
	return Fallback{Event: "result unroutable; dead-lettering the message",
		Decision: DeadLetter(c, in, KindFatal, "the result could not be routed: "+f.Err.Error(), now)}
}
