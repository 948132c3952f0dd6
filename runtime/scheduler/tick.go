package scheduler

import "time"

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
