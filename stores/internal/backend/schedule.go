package backend

import (
	"fmt"
	"time"
)

// CheckTick refuses a claim without a schedule or a tick.
func CheckTick(schedule string, tick time.Time) error {
	if schedule == "" || tick.IsZero() {
		return fmt.Errorf("claim tick: schedule %q and tick %s must be set", schedule, TickText(tick))
	}
	return nil
}

// TickText writes a tick for an error message: RFC 3339 UTC, milliseconds.
func TickText(tick time.Time) string { return tick.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
