package decide

import (
	"testing"
	"time"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestTickerNext(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	york := mustLoad(t, "America/New_York")
	at := func(loc *time.Location, s string) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02 15:04:05", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		name  string
		cron  string
		every time.Duration
		tz    string
		after time.Time
		want  []time.Time // the next ticks, in order
	}{
		{"a daily cron in UTC fires at its hour", "0 2 * * *", 0, "UTC", utc("2026-01-01T00:00:00Z"),
			[]time.Time{utc("2026-01-01T02:00:00Z"), utc("2026-01-02T02:00:00Z")}},
		{"a daily cron fires at its local hour", "0 2 * * *", 0, "Europe/Berlin", utc("2026-01-01T00:00:00Z"),
			[]time.Time{utc("2026-01-01T01:00:00Z"), utc("2026-01-02T01:00:00Z")}},
		{"a local time the spring-forward night skips fires when the clocks change, 03:00", "30 2 * * *", 0, "Europe/Berlin", at(berlin, "2026-03-28 03:00:00"),
			[]time.Time{at(berlin, "2026-03-29 03:00:00"), at(berlin, "2026-03-30 02:30:00")}},
		{"several skipped local times fire once, when the clocks change", "*/15 2 * * *", 0, "Europe/Berlin", at(berlin, "2026-03-29 00:00:00"),
			[]time.Time{at(berlin, "2026-03-29 03:00:00"), at(berlin, "2026-03-30 02:00:00")}},
		{"an hourly cron over the spring-forward night: 01:00, then 03:00 once for the missing 02:00, then 04:00", "0 * * * *", 0, "Europe/Berlin", at(berlin, "2026-03-29 00:30:00"),
			[]time.Time{at(berlin, "2026-03-29 01:00:00"), at(berlin, "2026-03-29 03:00:00"), at(berlin, "2026-03-29 04:00:00")}},
		{"a local time that exists after the change is not moved", "0 3 * * *", 0, "Europe/Berlin", at(berlin, "2026-03-28 12:00:00"),
			[]time.Time{at(berlin, "2026-03-29 03:00:00"), at(berlin, "2026-03-30 03:00:00")}},
		{"a local time the fall-back night repeats fires once, the first time", "30 2 * * *", 0, "Europe/Berlin", at(berlin, "2026-10-24 12:00:00"),
			[]time.Time{utc("2026-10-25T00:30:00Z"), utc("2026-10-26T01:30:00Z")}},
		{"an hourly cron over the fall-back night fires 02:00 once", "0 * * * *", 0, "Europe/Berlin", utc("2026-10-24T23:30:00Z"),
			[]time.Time{utc("2026-10-25T00:00:00Z"), utc("2026-10-25T02:00:00Z"), utc("2026-10-25T03:00:00Z")}},
		{"a minute cron over the fall-back hour fires each minute of it once", "*/30 * * * *", 0, "Europe/Berlin", utc("2026-10-24T23:45:00Z"),
			[]time.Time{utc("2026-10-25T00:00:00Z"), utc("2026-10-25T00:30:00Z"), utc("2026-10-25T02:00:00Z")}},
		{"the spring-forward rule holds in New York too", "30 2 * * *", 0, "America/New_York", at(york, "2026-03-07 12:00:00"),
			[]time.Time{at(york, "2026-03-08 03:00:00"), at(york, "2026-03-09 02:30:00")}},
		{"a descriptor is read as robfig/cron reads it", "@daily", 0, "UTC", utc("2026-05-05T10:00:00Z"),
			[]time.Time{utc("2026-05-06T00:00:00Z")}},
		{"every counts from the Unix epoch", "", time.Hour, "UTC", utc("2026-01-01T00:30:00Z"),
			[]time.Time{utc("2026-01-01T01:00:00Z"), utc("2026-01-01T02:00:00Z")}},
		{"every fires on its multiples even when they are not whole hours", "", 90 * time.Minute, "UTC", utc("1970-01-01T00:00:00Z"),
			[]time.Time{utc("1970-01-01T01:30:00Z"), utc("1970-01-01T03:00:00Z")}},
		{"a tick at the instant given is not next: the next one is", "", time.Second, "UTC", utc("2026-01-01T00:00:05Z"),
			[]time.Time{utc("2026-01-01T00:00:06Z"), utc("2026-01-01T00:00:07Z")}},
		{"every keeps its interval across a daylight-saving change, whatever the zone", "", time.Hour, "Europe/Berlin", utc("2026-03-29T00:30:00Z"),
			[]time.Time{utc("2026-03-29T01:00:00Z"), utc("2026-03-29T02:00:00Z")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tk, err := NewTicker(tc.cron, tc.every, tc.tz)
			if err != nil {
				t.Fatal(err)
			}
			after := tc.after
			for i, want := range tc.want {
				got := tk.Next(after)
				if !got.Equal(want) {
					t.Fatalf("NewTicker(%q, %s, %s).Next(%s) (tick %d) = %s, want %s", tc.cron, tc.every, tc.tz,
						after.In(tk.Location()), i+1, got.In(tk.Location()), want.In(tk.Location()))
				}
				after = got
			}
		})
	}
}

func TestTickerCountAndLast(t *testing.T) {
	sec, _ := NewTicker("", time.Second, "")
	daily, _ := NewTicker("0 2 * * *", 0, "Europe/Berlin")
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name      string
		tk        Ticker
		after, to time.Time
		count     int64
		last      time.Time
	}{
		{"every: a bound that is a tick counts", sec, base, base.Add(10 * time.Second), 10, base.Add(10 * time.Second)},
		{"every: a bound between ticks", sec, base.Add(500 * time.Millisecond), base.Add(3500 * time.Millisecond), 3, base.Add(3 * time.Second)},
		{"every: an empty interval", sec, base.Add(time.Second), base.Add(1500 * time.Millisecond), 0, time.Time{}},
		{"every: a long outage is counted without walking it", sec, base, base.AddDate(0, 1, 0), 31 * 24 * 3600, base.AddDate(0, 1, 0)},
		{"cron: a month of a daily tick over the spring-forward night", daily, base, time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC), 31, time.Date(2026, 3, 31, 0, 0, 0, 0, time.UTC)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tk.Count(tc.after, tc.to); got != tc.count {
				t.Errorf("Count(%s, %s) = %d, want %d", tc.after, tc.to, got, tc.count)
			}
			if got := tc.tk.Last(tc.after, tc.to); !got.Equal(tc.last) {
				t.Errorf("Last(%s, %s) = %s, want %s", tc.after, tc.to, got, tc.last)
			}
		})
	}
}

func TestNewTickerRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, cron string
		every      time.Duration
		tz         string
	}{
		{"both cron and every", "0 2 * * *", time.Hour, "UTC"},
		{"neither", "", 0, "UTC"},
		{"an unknown zone", "0 2 * * *", 0, "Mars/Olympus"},
		{"a cron that does not parse", "0 25 * * *", 0, "UTC"},
	} {
		if _, err := NewTicker(tc.cron, tc.every, tc.tz); err == nil {
			t.Errorf("NewTicker with %s: nil error", tc.name)
		}
	}
}
