package scheduler

import (
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// What a schedule does with its missed ticks (decide.MissedLatest and its
// siblings), as the schedules' views compare them.
const (
	MissedLatest = decide.MissedLatest
	MissedAll    = decide.MissedAll
	MissedSkip   = decide.MissedSkip
)

// TickStatus is where a schedule stands at an instant, as `acemq-flow
// schedules` shows it: computed from its last claimed tick by the same
// decide.Ticker and decide.PlanTicks the loop runs.
type TickStatus struct {
	// Next is the first tick after the instant, the zero time when the
	// cron expression has none within five years.
	Next time.Time
	// Missed is how many ticks came due after the last claimed one, more
	// than LateAfter before the instant, and were not claimed: no runtime
	// fired them. A tick due less than LateAfter before is not counted, as
	// a running loop still fires it on time. A schedule with no claimed
	// tick has missed nothing (a new schedule starts with its next tick).
	// Ticks older than missed_window are counted up to a million, as the
	// loop counts them (decide.Ticker.Count).
	Missed int64
	// CatchUp is how many of the missed ticks the loop fires when a
	// runtime starts, by the schedule's `missed` and `missed_window`
	// (PlanTicks): latest one, all those within the window, skip none.
	CatchUp int64
	// GivenUp is how many it never fires: Missed less CatchUp, the count
	// the loop adds to acemq_schedule_missed_ticks_total when it starts.
	GivenUp int64
}

// ScheduleStatus returns s's status at now from its last claimed tick
// (claimed false: it has none). It fails, naming the schedule, when its
// ticks cannot be computed. It is pure.
func ScheduleStatus(s plan.Schedule, last time.Time, claimed bool, now time.Time) (TickStatus, error) {
	tk, err := decide.NewTicker(s.Cron, time.Duration(s.Every), s.Timezone)
	if err != nil {
		return TickStatus{}, fmt.Errorf("schedule %q (%s): %w", s.Name, s.At, err)
	}
	st := TickStatus{Next: tk.Next(now)}
	if !claimed {
		return st, nil
	}
	upTo := now.Add(-LateAfter)
	if !upTo.After(last) {
		return st, nil
	}
	// The ticks before missed_window are given up whatever the policy:
	// counted here once, as PlanTicks would (a cron schedule's count walks
	// its ticks, up to maxCount). PlanTicks decides about the rest, from
	// the window's edge: a loop starting at now deals with (last, now], and
	// fires the ticks of the last LateAfter too, which are not missed yet.
	from := last
	if edge := now.Add(-time.Duration(s.MissedWindow)); edge.After(from) {
		old := edge
		if upTo.Before(old) {
			old = upTo
		}
		st.GivenUp = tk.Count(from, old)
		from = old
	}
	within := tk.Count(from, upTo)
	p := decide.PlanTicks(tk, from, now, upTo, s.Missed, time.Duration(s.MissedWindow), fireLimit)
	st.Missed = st.GivenUp + within
	st.GivenUp += p.Missed
	st.CatchUp = within - p.Missed
	return st, nil
}
