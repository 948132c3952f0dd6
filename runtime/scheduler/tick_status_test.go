package scheduler

import (
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

func TestScheduleStatus(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 500_000_000, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	second := func(missed string, window time.Duration) plan.Schedule {
		return plan.Schedule{Name: "beat", Flow: "f", Every: plan.Duration(time.Second), Missed: missed, MissedWindow: plan.Duration(window)}
	}
	nightly := plan.Schedule{Name: "nightly", Flow: "f", Cron: "0 2 * * *", Timezone: "Europe/Berlin", Missed: MissedLatest, MissedWindow: plan.Duration(24 * time.Hour)}
	cases := []struct {
		name    string
		s       plan.Schedule
		last    time.Time
		claimed bool
		want    TickStatus
	}{
		{"a schedule never claimed has missed nothing", second(MissedLatest, time.Hour), time.Time{}, false,
			TickStatus{Next: ago(-500 * time.Millisecond)}},
		{"a tick claimed a moment ago: nothing missed", second(MissedLatest, time.Hour), ago(500 * time.Millisecond), true,
			TickStatus{Next: ago(-500 * time.Millisecond)}},
		{"ticks of the last minute not claimed yet are not missed: a running loop still fires them", second(MissedLatest, time.Hour), ago(30*time.Second + 500*time.Millisecond), true,
			TickStatus{Next: ago(-500 * time.Millisecond)}},
		{"latest: of the ticks missed, one fires on start and the rest are given up", second(MissedLatest, time.Hour), ago(70*time.Second + 500*time.Millisecond), true,
			TickStatus{Next: ago(-500 * time.Millisecond), Missed: 10, CatchUp: 1, GivenUp: 9}},
		{"all: every missed tick fires on start", second(MissedAll, time.Hour), ago(70*time.Second + 500*time.Millisecond), true,
			TickStatus{Next: ago(-500 * time.Millisecond), Missed: 10, CatchUp: 10}},
		{"all: the ticks before missed_window are given up", second(MissedAll, 65*time.Second), ago(70*time.Second + 500*time.Millisecond), true,
			TickStatus{Next: ago(-500 * time.Millisecond), Missed: 10, CatchUp: 5, GivenUp: 5}},
		{"skip: no missed tick fires", second(MissedSkip, time.Hour), ago(70*time.Second + 500*time.Millisecond), true,
			TickStatus{Next: ago(-500 * time.Millisecond), Missed: 10, GivenUp: 10}},
		{"a nightly cron last fired three nights ago: two missed, yesterday's fires", nightly, time.Date(2026, 5, 29, 0, 0, 0, 0, time.UTC), true,
			TickStatus{Next: time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC), Missed: 3, CatchUp: 1, GivenUp: 2}},
		{"a last tick after now (another clock ahead) misses nothing", second(MissedAll, time.Hour), ago(-time.Hour), true,
			TickStatus{Next: ago(-500 * time.Millisecond)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ScheduleStatus(tc.s, tc.last, tc.claimed, now)
			if got.CatchUp+got.GivenUp != got.Missed || got.CatchUp < 0 {
				t.Errorf("ScheduleStatus(%s) = %+v: the ticks fired on start and given up do not make up the missed ones", tc.s.Key(), got)
			}
			if err != nil || got != tc.want {
				t.Fatalf("ScheduleStatus(%s, last %s, claimed %v, now %s) = %+v, %v; want %+v",
					tc.s.Key(), TickText(tc.last), tc.claimed, TickText(now), got, err, tc.want)
			}
		})
	}
	if _, err := ScheduleStatus(plan.Schedule{Name: "bad", Cron: "61 * * * *"}, now, true, now); err == nil {
		t.Error(`ScheduleStatus(cron "61 * * * *") = nil error; want the cron refused`)
	}
}
