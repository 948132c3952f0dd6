package testenv

import (
	"sync/atomic"
	"time"
)

// Clock is a clock that moves only when told, for stores' Options.Now: it
// starts at 2026-09-09 14:00 UTC.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a Clock at its start.
func NewClock() *Clock {
	c := &Clock{}
	c.ns.Store(time.Date(2026, 9, 9, 14, 0, 0, 0, time.UTC).UnixNano())
	return c
}

// Now is the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
