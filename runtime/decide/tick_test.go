package decide

import (
	"slices"
	"testing"
	"time"
)

func TestPlanTicks(t *testing.T) {
	sec, _ := NewTicker("", time.Second, "")
	daily, _ := NewTicker("0 2 * * *", 0, "Europe/Berlin")
	base := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	s := func(n float64) time.Time { return base.Add(time.Duration(n * float64(time.Second))) }
	secs := func(ns ...float64) []time.Time {
		var out []time.Time
		for _, n := range ns {
			out = append(out, s(n))
		}
		return out
	}
	cases := []struct {
		name              string
		tk                Ticker
		cursor, now, upTo time.Time
		missed            string
		window            time.Duration
		limit             int
		fire              []time.Time
		missedN           int64
		cursorAfter       time.Time
	}{
		{"ticks that came due while the loop ran fire", sec, s(10), s(12.5), s(5), MissedLatest, time.Hour, 100, secs(11, 12), 0, s(12.5)},
		{"nothing due: the cursor moves to now", sec, s(10), s(10.5), s(5), MissedLatest, time.Hour, 100, nil, 0, s(10.5)},
		{"recovery, latest: the most recent missed tick fires once, the rest are counted", sec, s(10), s(20.3), s(20.3), MissedLatest, time.Hour, 100, secs(20), 9, s(20.3)},
		{"recovery, all: every missed tick fires, in order", sec, s(10), s(20.3), s(20.3), MissedAll, time.Hour, 100, secs(11, 12, 13, 14, 15, 16, 17, 18, 19, 20), 0, s(20.3)},
		{"recovery, skip: no missed tick fires, each is counted", sec, s(10), s(20.3), s(20.3), MissedSkip, time.Hour, 100, nil, 10, s(20.3)},
		{"all looks back missed_window only: older ticks are counted", sec, s(10), s(20.3), s(20.3), MissedAll, 5 * time.Second, 100, secs(16, 17, 18, 19, 20), 5, s(20.3)},
		{"latest with every missed tick older than the window but the newest", sec, s(10), s(100), s(100), MissedLatest, 5 * time.Second, 100, secs(100), 89, s(100)},
		{"latest when every missed tick is older than the window fires none of them", sec, s(10), s(100), s(95), MissedLatest, 5 * time.Second, 100, secs(96, 97, 98, 99, 100), 85, s(100)},
		{"missed and on-time ticks together: the latest missed one, then each on-time one", sec, s(10), s(17.2), s(15.5), MissedLatest, time.Hour, 100, secs(15, 16, 17), 4, s(17.2)},
		{"all stops at the limit, and the cursor at the last tick fired", sec, s(10), s(20.3), s(20.3), MissedAll, time.Hour, 3, secs(11, 12, 13), 0, s(13)},
		{"the next call goes on from the cursor", sec, s(13), s(20.4), s(20.3), MissedAll, time.Hour, 3, secs(14, 15, 16), 0, s(16)},
		{"on-time ticks past the limit wait for the next call", sec, s(10), s(20.3), s(5), MissedLatest, time.Hour, 4, secs(11, 12, 13, 14), 0, s(14)},
		{"a cursor at now fires nothing", sec, s(10), s(10), s(10), MissedAll, time.Hour, 100, nil, 0, s(10)},
		{"a daily cron three days down, latest: yesterday's 02:00 fires", daily, time.Date(2026, 5, 29, 0, 0, 0, 0, time.UTC), base, base, MissedLatest, 24 * time.Hour,
			100, []time.Time{time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)}, 2, base},
		{"a daily cron three days down, all within 24h: only the last 02:00 fires, two are counted", daily, time.Date(2026, 5, 29, 0, 0, 0, 0, time.UTC), base, base, MissedAll, 24 * time.Hour,
			100, []time.Time{time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)}, 2, base},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanTicks(tc.tk, tc.cursor, tc.now, tc.upTo, tc.missed, tc.window, tc.limit)
			if !slices.EqualFunc(p.Fire, tc.fire, time.Time.Equal) || p.Missed != tc.missedN || !p.Cursor.Equal(tc.cursorAfter) {
				t.Fatalf("PlanTicks(cursor %s, now %s, missed up to %s, %s, window %s, limit %d) = fire %v, missed %d, cursor %s; want fire %v, missed %d, cursor %s",
					tc.cursor.Format(time.TimeOnly), tc.now.Format(time.TimeOnly), tc.upTo.Format(time.TimeOnly), tc.missed, tc.window, tc.limit,
					p.Fire, p.Missed, p.Cursor, tc.fire, tc.missedN, tc.cursorAfter)
			}
		})
	}
}
