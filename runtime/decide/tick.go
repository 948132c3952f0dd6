package decide

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// What a schedule does with the ticks missed while no runtime ran
// (FLOW-FORMAT §4; spec.MissedLatest and its siblings).
const (
	MissedLatest = "latest"
	MissedAll    = "all"
	MissedSkip   = "skip"
)

// TickPlan is what a schedule's loop does next: the ticks to fire, oldest
// first, how many ticks it passes over unfired (missed), and the cursor it
// has reached once it has fired them.
type TickPlan struct {
	Fire   []time.Time
	Missed int64
	Cursor time.Time
}

// PlanTicks decides what to do with the ticks in (cursor, now]: the cursor
// is the last tick the loop dealt with (the store's last claimed tick at
// start). A tick after missedUpTo came due while the loop ran and fires. A
// tick at or before it was missed: with MissedAll each one within window of
// now fires, in order; with MissedLatest the latest one within the window
// does; with MissedSkip none does; every missed tick that does not fire is
// counted. At most limit ticks fire; the cursor then stops at the last of
// them, and the next call goes on from there. PlanTicks is pure.
func PlanTicks(t Ticker, cursor, now, missedUpTo time.Time, missed string, window time.Duration, limit int) TickPlan {
	p := TickPlan{Cursor: now}
	if !now.After(cursor) {
		p.Cursor = cursor
		return p
	}
	missedUpTo = minTime(missedUpTo, now)
	if missedUpTo.After(cursor) {
		// The missed ticks, (cursor, missedUpTo]: those before the window
		// are only counted.
		from := cursor
		if edge := now.Add(-window); edge.After(from) {
			old := minTime(edge, missedUpTo)
			p.Missed += t.Count(from, old)
			from = old
		}
		switch missed {
		case MissedAll:
			p.Fire = t.Between(from, missedUpTo, limit)
			if len(p.Fire) == limit {
				p.Cursor = p.Fire[len(p.Fire)-1]
				return p
			}
		case MissedSkip:
			p.Missed += t.Count(from, missedUpTo)
		default: // MissedLatest
			if last := t.Last(from, missedUpTo); !last.IsZero() {
				p.Missed += t.Count(from, missedUpTo) - 1
				p.Fire = append(p.Fire, last)
			}
		}
		cursor = missedUpTo
	}
	p.Fire = append(p.Fire, t.Between(cursor, now, limit-len(p.Fire))...)
	if n := len(p.Fire); n == limit && t.Count(p.Fire[n-1], now) > 0 {
		p.Cursor = p.Fire[n-1]
	}
	return p
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

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
// a run of its target with its payload (FirstMessage), whose message and
// correlation ids are TickMessageID, first seen and timestamped at the
// tick, from the schedule's flow, with x-acemq-schedule and x-acemq-tick.
// It is pure: every replica builds the same message for a tick.
func TickMessage(p *plan.Plan, s plan.Schedule, tick time.Time) (Message, error) {
	target := Target{Pipeline: s.Send.Pipeline, Itinerary: s.Send.Itinerary, Saga: s.Send.Saga}
	if target == (Target{}) {
		target.Exchange, target.RoutingKey = s.Send.Exchange, s.Send.RoutingKey
	}
	payload := []byte(s.Send.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	m, err := FirstMessage(p, target, payload, tick)
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
