package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// LastTicks is what View reads of the store: each schedule's last claimed
// tick (stores.ScheduleTicks's LastTick).
type LastTicks interface {
	LastTick(ctx context.Context, schedule string) (tick time.Time, ok bool, err error)
}

// View is what `acemq-flow schedules` and the admin API's GET /v1/schedules
// show, and their JSON document.
type View struct {
	At        string         `json:"at,omitempty"` // when the ticks were read, RFC 3339 UTC
	Schedules []ScheduleView `json:"schedules"`
}

// ScheduleView is one schedule. Ticks are RFC 3339 UTC, as x-acemq-tick;
// LastTick is null for a schedule never claimed, NextTick for a cron
// expression with no tick within five years.
type ScheduleView struct {
	Flow         string  `json:"flow"`
	Name         string  `json:"name"`
	Cron         string  `json:"cron,omitempty"`
	Every        string  `json:"every,omitempty"`
	Timezone     string  `json:"timezone"`
	MissedPolicy string  `json:"missed_policy"`
	MissedWindow string  `json:"missed_window"`
	Send         string  `json:"send"`
	LastTick     *string `json:"last_tick"`
	NextTick     *string `json:"next_tick"`
	Missed       int64   `json:"missed"`
	CatchUp      int64   `json:"missed_fired_on_start"`
	GivenUp      int64   `json:"missed_given_up"`
}

// ViewAt reads each schedule's last claimed tick from ticks and computes
// the rest at now with the loop's own code (ScheduleStatus). It fails,
// naming the schedule, when the store cannot be read.
func ViewAt(ctx context.Context, ticks LastTicks, ss []plan.Schedule, now time.Time) (View, error) {
	v := View{At: TickText(now.Truncate(time.Millisecond)), Schedules: []ScheduleView{}}
	for _, s := range ss {
		last, claimed, err := ticks.LastTick(ctx, s.Key())
		if err != nil {
			return v, fmt.Errorf("read the last tick of schedule %q: %w", s.Key(), err)
		}
		st, err := ScheduleStatus(s, last, claimed, now)
		if err != nil {
			return v, err
		}
		sv := ScheduleView{Flow: s.Flow, Name: s.Name, Cron: s.Cron, Timezone: s.Timezone, MissedPolicy: s.Missed,
			MissedWindow: s.MissedWindow.String(), Send: s.Target, Missed: st.Missed, CatchUp: st.CatchUp, GivenUp: st.GivenUp,
			NextTick: tickText(st.Next)}
		if s.Cron == "" {
			sv.Every = s.Every.String()
		}
		if claimed {
			sv.LastTick = tickText(last)
		}
		v.Schedules = append(v.Schedules, sv)
	}
	return v, nil
}

// tickText is t as x-acemq-tick writes it, nil for the zero time.
func tickText(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := TickText(t)
	return &s
}
