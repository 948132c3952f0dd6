package decide

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// The delay ladder (FLOW-FORMAT §4): which level a delay enters, its routing
// key, the headers that say where it goes when due, and what a due message
// becomes. The broker routes between levels on its own; the engine, send and
// the `.due` consumer carry these decisions out.

// ErrDelayTooLong is returned for a delay beyond what the ladder holds,
// 2^28 - 1 of its units (about 8.5 years of seconds).
var ErrDelayTooLong = errors.New("delay too long")

// UnroutableRetry is how long, in seconds of the ladder, a due message that
// reached no queue waits in the ladder before it is tried again (patterns.txt,
// "Scheduling": it is never dead-lettered).
const UnroutableRetry = 10

// Ladder is the delay ladder as the decisions see it. Unit is how long one
// second of it really lasts: plan.LadderUnit, which the zero value means.
// A test may shift it (a whole number of milliseconds, with the ladder of
// plan.Ladder declared for that unit on a virtual host of its own), so that
// a "4h" delay passes in 14.4 s with a unit of 1 ms: delays are still
// written in seconds, and every wait, x-acemq-due-at included, is scaled.
// A Ladder is a value: safe for concurrent use.
type Ladder struct {
	Unit time.Duration
}

func (l Ladder) unit() time.Duration {
	if l.Unit < time.Millisecond {
		return plan.LadderUnit
	}
	return l.Unit
}

// real is how long a delay of d lasts on this ladder.
func (l Ladder) real(d time.Duration) time.Duration {
	if l.unit() == time.Second {
		return d
	}
	return time.Duration(float64(d) * float64(l.unit()) / float64(time.Second))
}

// ladderTime is the delay that lasts d on this ladder: real's inverse.
func (l Ladder) ladderTime(d time.Duration) time.Duration {
	if l.unit() == time.Second {
		return d
	}
	return time.Duration(float64(d) * float64(time.Second) / float64(l.unit()))
}

// MaxDelay is the longest delay the ladder holds: 2^28 - 1 s.
func (l Ladder) MaxDelay() time.Duration { return (1<<plan.LadderLevels - 1) * time.Second }

// Units is delay d in whole seconds, rounded up, so that a message is
// never early; a delay of zero or less is 0. A delay beyond MaxDelay is
// refused with an error wrapping ErrDelayTooLong.
func (l Ladder) Units(d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, nil
	}
	if d > l.MaxDelay() {
		return 0, fmt.Errorf("%w: %s is longer than the delay ladder holds (2^28 - 1 s, about 8.5 years); deliver it in steps, or store it and schedule it later",
			ErrDelayTooLong, d)
	}
	return int64((d + time.Second - 1) / time.Second), nil
}

// DelayKey is the routing key of a delay of units: its 28 binary digits,
// most significant first, dot-separated ("0.0.….1.0.1" for 5). units must
// be within 0 and 2^28 - 1.
func DelayKey(units int64) string {
	var b strings.Builder
	b.Grow(2*plan.LadderLevels - 1)
	for k := plan.LadderLevels - 1; k >= 0; k-- {
		if units>>k&1 == 1 {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
		if k > 0 {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// DelayLevel is the level a delay of units is published to, its highest set
// digit, or -1 for 0 units (straight to `.due`).
func DelayLevel(units int64) int {
	if units <= 0 {
		return -1
	}
	return bits.Len64(uint64(units)) - 1
}

// Route says where a message delayed by d is published: the exchange of
// the level of its highest set digit and its delay key, or, for a delay
// under a second, the default exchange with routing key `.due`, whose
// consumer holds it until it is due.
func (l Ladder) Route(d time.Duration) (exchange, routingKey string, err error) {
	if d < time.Second {
		return "", plan.DueQueue, nil
	}
	units, err := l.Units(d)
	if err != nil {
		return "", "", err
	}
	return plan.LadderExchange(DelayLevel(units)), DelayKey(units), nil
}

// Delay prepares m, which is to be delivered to exchange with routingKey at
// dueAt, for the ladder (see Ladder.Delay), with the ladder of 1 s levels.
func Delay(m *Message, exchange, routingKey string, dueAt, now time.Time) (ladderExchange, ladderKey string, err error) {
	return Ladder{}.Delay(m, exchange, routingKey, dueAt, now)
}

// Delay prepares m, which is to be delivered to exchange with routingKey at
// dueAt, for the ladder: it writes the destination and the due time in m's
// headers (a copy: the caller's table is not changed), drops the broker's
// dead-letter history and m's own expiration (which would let it leave a
// level early), addresses m to the ladder and returns where that is. A due
// time at or before now goes straight to `.due`. Nothing else of m changes.
// A delay beyond MaxDelay is refused with an error wrapping ErrDelayTooLong,
// and m is left as it was.
func (l Ladder) Delay(m *Message, exchange, routingKey string, dueAt, now time.Time) (ladderExchange, ladderKey string, err error) {
	ladderExchange, ladderKey, err = l.Route(dueAt.Sub(now))
	if err != nil {
		return "", "", err
	}
	dueAt = now.Add(l.real(dueAt.Sub(now)))
	h := copyTable(m.Headers)
	DropDeaths(h)
	h[plan.HeaderDeliverExchange] = exchange
	h[plan.HeaderDeliverRoutingKey] = routingKey
	h[plan.HeaderDueAt] = FormatDueAt(dueAt)
	m.Headers, m.Expiration = h, ""
	m.Exchange, m.RoutingKey = ladderExchange, ladderKey
	return ladderExchange, ladderKey, nil
}

// FormatDueAt writes a due time as x-acemq-due-at carries it: RFC 3339 UTC
// with milliseconds.
func FormatDueAt(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// Destination reads where a delayed message goes and when it is due from
// its headers. ok is false when it names no destination; a due time that is
// missing or unreadable is zero.
func Destination(h Table) (exchange, routingKey string, dueAt time.Time, ok bool) {
	ex, hasEx := h[plan.HeaderDeliverExchange]
	key, hasKey := h[plan.HeaderDeliverRoutingKey]
	if !hasEx || !hasKey {
		return "", "", time.Time{}, false
	}
	if t, err := time.Parse(time.RFC3339Nano, HeaderText(h[plan.HeaderDueAt])); err == nil {
		dueAt = t
	}
	return HeaderText(ex), HeaderText(key), dueAt, true
}

// What a due message becomes.
const (
	DueDeliver    = "deliver"     // publish to the destination now
	DueWait       = "wait"        // hold it for Wait, then publish to the destination
	DueDelay      = "delay"       // early by more than a unit: back into the ladder until due
	DueDeadLetter = "dead-letter" // no destination: to `.due`'s .dlq, with the reason
)

// DueDecision is what happens to one message taken from `.due`: Publish,
// after Wait for DueWait, then acknowledge.
type DueDecision struct {
	Action  string
	Publish Message
	Wait    time.Duration
	Reason  string // for DueDeadLetter
}

// Due decides what message m, taken from `.due` at now, becomes. With a
// destination in its headers it is that destination's message: the broker's
// x-death history removed (RabbitMQ 3.10 drops a message whose x-death shows
// a cycle), everything else unchanged, the ladder's headers kept. It is
// never early: a message due later than now (a publisher whose clock runs
// ahead, a delay under one unit sent straight to `.due`) is held until due
// when that is within a second of the ladder, and otherwise goes back into the ladder for
// the rest. Without a destination it is dead-lettered to `.due`'s .dlq:
// nothing says where it should go.
func (l Ladder) Due(m Message, now time.Time) DueDecision {
	exchange, key, dueAt, ok := Destination(m.Headers)
	m.Headers = copyTable(m.Headers)
	DropDeaths(m.Headers)
	if !ok {
		reason := fmt.Sprintf("message taken from %s names no destination (headers %s and %s); publish into the delay ladder with both set",
			plan.DueQueue, plan.HeaderDeliverExchange, plan.HeaderDeliverRoutingKey)
		m.Headers[plan.HeaderError] = reason
		m.Headers[plan.HeaderErrorKind] = KindFatal
		m.Headers[plan.HeaderFailedQueue] = plan.DueQueue
		m.Headers[plan.HeaderFailedAt] = FormatTime(now)
		m.DeliveryMode = Persistent
		return DueDecision{Action: DueDeadLetter, Reason: reason, Publish: to("", plan.DeadLetterQueue(plan.DueQueue), m)}
	}
	early := dueAt.Sub(now)
	switch {
	case early > l.unit():
		if ex, k, err := l.Route(l.ladderTime(early)); err == nil {
			return DueDecision{Action: DueDelay, Publish: to(ex, k, m)}
		}
		// Beyond the ladder (a due time decades ahead): delivered, as
		// nothing could hold it.
	case early > 0:
		return DueDecision{Action: DueWait, Wait: early, Publish: to(exchange, key, m)}
	}
	return DueDecision{Action: DueDeliver, Publish: to(exchange, key, m)}
}

// Unroutable is due message m, which its destination did not take (nothing
// bound, or the exchange missing), sent back into the ladder for
// UnroutableRetry seconds with its destination and due time unchanged and
// x-acemq-due-retries counted: it is tried again until it is delivered,
// never dead-lettered.
func (l Ladder) Unroutable(m Message) Message {
	m.Headers = copyTable(m.Headers)
	DropDeaths(m.Headers)
	n, _ := HeaderInt(m.Headers[plan.HeaderDueRetries])
	m.Headers[plan.HeaderDueRetries] = int64(n + 1)
	m.Expiration = ""
	return to(plan.LadderExchange(DelayLevel(UnroutableRetry)), DelayKey(UnroutableRetry), m)
}

// StepAddress is where a step's input is published: its pipeline's
// exchange and the step's routing key.
type StepAddress struct{ Exchange, RoutingKey string }

// StepDelays are the delays of a plan's steps with `delay:` (FLOW-FORMAT
// §4), by where their input is published.
type StepDelays map[StepAddress]time.Duration

// DelayedSteps returns the steps of pl with a delay.
func DelayedSteps(pl *plan.Plan) StepDelays {
	out := StepDelays{}
	for _, c := range pl.Consumers {
		if c.Kind == plan.KindStep && c.Delay > 0 {
			out[StepAddress{plan.PipelineExchange(c.Pipeline), c.Step}] = time.Duration(c.Delay)
		}
	}
	return out
}

// Apply sends what decision dec of a delivery to consumer c publishes to a
// delayed step into ladder l instead, due the step's delay from now: the
// previous step acknowledges once that publish is confirmed, as for any
// output. A delay the ladder cannot hold (the validator refuses those; a
// plan built otherwise) dead-letters the delivery with the reason. dec's
// messages are not changed: the decision returned has copies.
func (ds StepDelays) Apply(l Ladder, c *plan.Consumer, in Inbound, dec Decision, now time.Time) Decision {
	copied := false
	for i, p := range dec.Publish {
		delay, ok := ds[StepAddress{p.Exchange, p.RoutingKey}]
		if !ok || p.BestEffort {
			continue
		}
		if !copied {
			dec.Publish, copied = append([]Publish(nil), dec.Publish...), true
		}
		if _, _, err := l.Delay(&dec.Publish[i].Message, p.Exchange, p.RoutingKey, now.Add(delay), now); err != nil {
			return DeadLetter(c, in, KindFatal, fmt.Sprintf("step %q: %v", p.RoutingKey, err), now)
		}
	}
	return dec
}
