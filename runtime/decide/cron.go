package decide

import (
	"errors"
	"fmt"
	"time"
	_ "time/tzdata" // schedules' IANA zones, on machines without a zoneinfo database

	"github.com/robfig/cron/v3"
)

// cronParser reads `cron` as FLOW-FORMAT §4 says: five fields or an
// `@hourly`-style descriptor, robfig/cron's standard parser (spec checks
// with the same one).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// maxCount bounds the ticks a count walks one by one (a cron schedule's);
// a count that reaches it is reported as maxCount.
const maxCount = 1_000_000

// Ticker computes the ticks of one schedule: the instants of a cron
// expression in a time zone, or every multiple of an interval from the Unix
// epoch. It is pure and safe for concurrent use.
//
// Daylight-saving rules (FLOW-FORMAT §4): a local time that does not exist
// that day (02:30 on the night the clocks go from 02:00 to 03:00) fires at
// the next one that does, the instant the clocks changed; several such
// times are one tick there. A local time that occurs twice (02:30 on the
// night the clocks go back) fires once, the first time. robfig/cron's Next
// does neither (it skips the first and fires the second twice), so Next
// corrects it. An `every` ticker counts absolute time, which has no
// daylight saving.
type Ticker struct {
	spec  *cron.SpecSchedule // the cron expression, nil for every
	wall  *cron.SpecSchedule // spec evaluated in UTC: it matches wall-clock times written as UTC instants
	every time.Duration
	loc   *time.Location
}

// NewTicker returns the ticker of a cron expression or an interval (exactly
// one of them set) in the IANA zone tz ("" is UTC).
func NewTicker(expr string, every time.Duration, tz string) (Ticker, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return Ticker{}, fmt.Errorf("timezone %q: %w", tz, err)
		}
		loc = l
	}
	switch {
	case expr != "" && every != 0:
		return Ticker{}, errors.New("set cron or every, not both")
	case every < 0 || (expr == "" && every == 0):
		return Ticker{}, errors.New("set cron, or a positive every")
	case every > 0:
		return Ticker{every: every, loc: loc}, nil
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return Ticker{}, fmt.Errorf("cron %q: %w", expr, err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return Ticker{}, fmt.Errorf("cron %q: not a five-field expression or a descriptor", expr)
	}
	spec.Location = loc
	wall := *spec
	wall.Location = time.UTC
	return Ticker{spec: spec, wall: &wall, loc: loc}, nil
}

// Location is the zone the ticker's cron expression is read in.
func (t Ticker) Location() *time.Location { return t.loc }

// Next returns the first tick strictly after after, or the zero time when
// a cron expression has none within five years (robfig/cron's limit; such
// as the 30th of February).
func (t Ticker) Next(after time.Time) time.Time {
	if t.spec == nil {
		n := after.UnixNano()
		e := int64(t.every)
		k := n / e
		if n < 0 && n%e != 0 {
			k-- // floor
		}
		return time.Unix(0, (k+1)*e).UTC()
	}
	c := t.spec.Next(after)
	for !c.IsZero() && t.repeated(c) {
		c = t.spec.Next(c)
	}
	if g := t.gapTick(after, c); !g.IsZero() {
		return g
	}
	return c
}

// repeated reports whether c's local time is the second occurrence of a
// time that occurs twice: c lies within the shift after the clocks went
// back, where the same wall clock already came an hour (the shift) before.
func (t Ticker) repeated(c time.Time) bool {
	start, _ := c.In(t.loc).ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, before := start.Add(-time.Nanosecond).In(t.loc).Zone()
	_, after := start.In(t.loc).Zone()
	shift := time.Duration(before-after) * time.Second
	return shift > 0 && !c.Before(start) && c.Before(start.Add(shift))
}

// gapTick returns the first instant in (after, until] (until zero: no bound
// within five years) at which the clocks went forward over a local time the
// cron expression matches, or the zero time: that time does not exist, so
// it fires when the clocks change, the first time that does.
func (t Ticker) gapTick(after, until time.Time) time.Time {
	limit := until
	if limit.IsZero() {
		limit = after.AddDate(5, 0, 0)
	}
	at := after
	for {
		_, end := at.In(t.loc).ZoneBounds()
		if end.IsZero() || end.After(limit) {
			return time.Time{}
		}
		if end.After(after) {
			_, before := end.Add(-time.Nanosecond).In(t.loc).Zone()
			_, now := end.In(t.loc).Zone()
			if shift := time.Duration(now-before) * time.Second; shift > 0 {
				// The wall clock jumps from w0 to w0+shift: is a time in
				// [w0, w0+shift) one the expression matches?
				w0 := asUTC(end.In(time.FixedZone("", before)))
				if m := t.wall.Next(w0.Add(-time.Second)); !m.IsZero() && m.Before(w0.Add(shift)) {
					return end
				}
			}
		}
		at = end
	}
}

// asUTC is the instant whose UTC wall clock reads as t's does.
func asUTC(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// Count returns how many ticks fall in (after, upTo], up to maxCount.
func (t Ticker) Count(after, upTo time.Time) int64 {
	if !upTo.After(after) {
		return 0
	}
	if t.spec == nil {
		first := t.Next(after)
		if first.After(upTo) {
			return 0
		}
		return int64(upTo.Sub(first)/t.every) + 1
	}
	var n int64
	for c := t.Next(after); !c.IsZero() && !c.After(upTo) && n < maxCount; c = t.Next(c) {
		n++
	}
	return n
}

// Last returns the latest tick in (after, upTo], or the zero time when
// there is none.
func (t Ticker) Last(after, upTo time.Time) time.Time {
	if !upTo.After(after) {
		return time.Time{}
	}
	if t.spec == nil {
		first := t.Next(after)
		if first.After(upTo) {
			return time.Time{}
		}
		return first.Add(upTo.Sub(first) / t.every * t.every)
	}
	var last time.Time
	for c := t.Next(after); !c.IsZero() && !c.After(upTo); c = t.Next(c) {
		last = c
	}
	return last
}

// Between returns the ticks in (after, upTo], oldest first, at most limit
// of them.
func (t Ticker) Between(after, upTo time.Time, limit int) []time.Time {
	var out []time.Time
	for c := t.Next(after); !c.IsZero() && !c.After(upTo) && len(out) < limit; c = t.Next(c) {
		out = append(out, c)
	}
	return out
}
