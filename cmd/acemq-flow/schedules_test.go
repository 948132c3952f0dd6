package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/scheduler"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// schedulesFlow has a schedule of each kind the listing tells apart.
const schedulesFlow = `version: acemq.flow/v1
name: clocks
schedules:
  - name: beat
    every: 10s
    missed: all
    missed_window: 90s
    send: {exchange: clocks, routing_key: beat}
  - name: nightly
    cron: "30 2 * * *"
    timezone: Europe/Berlin
    send: {exchange: clocks, routing_key: nightly}
  - name: hourly
    cron: "@hourly"
    missed: skip
    send: {exchange: clocks, routing_key: hourly}
  - name: minutely
    every: 1m
    timezone: America/New_York
    send: {exchange: clocks, routing_key: minutely}
`

// schedulesAt is the instant the listing tests read the schedules at.
var schedulesAt = time.Date(2026, 6, 1, 12, 0, 0, 500_000_000, time.UTC)

func writeSchedulesFlow(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clocks.yaml")
	if err := os.WriteFile(path, []byte(schedulesFlow), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fixSchedulesNow makes `schedules` read the ticks at schedulesAt.
func fixSchedulesNow(t *testing.T) {
	t.Helper()
	saved := schedulesNow
	schedulesNow = func() time.Time { return schedulesAt }
	t.Cleanup(func() { schedulesNow = saved })
}

// TestSchedulesListsLastNextAndMissed claims ticks through the store's
// own ClaimTick, as the runtimes' loop does, on each backend, and lists
// them at a fixed instant; both backends give the same goldens.
//
//   - beat (every 10s, all within 90s) last fired 2 min ago: the six ticks
//     from 11:58:10 to 11:59:00 are missed (12:00:00 is under a minute old,
//     which a running loop still fires); a start fires the three within
//     90 s and gives up three.
//   - nightly (02:30 in Berlin, latest) last fired three nights ago: three
//     missed, a start fires one.
//   - hourly (skip) was never claimed: it has missed nothing.
//   - minutely claimed its 11:59 tick: nothing missed.
func TestSchedulesListsLastNextAndMissed(t *testing.T) {
	backends := []struct {
		name string
		open func(t *testing.T) (string, stores.ScheduleTicks)
	}{
		{"sqlite", func(t *testing.T) (string, stores.ScheduleTicks) {
			st := storetest.OpenSQLite(t, stores.Options{})
			return "sqlite:" + st.Path(), st
		}},
		{"postgres", func(t *testing.T) (string, stores.ScheduleTicks) { // skipped without ACEMQ_TEST_POSTGRES_URL
			st, url := storetest.OpenPostgresSchema(t, stores.Options{})
			return url, st
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			fixSchedulesNow(t)
			store, ticks := b.open(t)
			flow := writeSchedulesFlow(t)
			claims := []struct {
				key  string
				tick time.Time
			}{
				{"clocks/beat", time.Date(2026, 6, 1, 11, 57, 50, 0, time.UTC)},
				{"clocks/beat", time.Date(2026, 6, 1, 11, 58, 0, 0, time.UTC)},
				{"clocks/nightly", time.Date(2026, 5, 28, 0, 30, 0, 0, time.UTC)},
				{"clocks/nightly", time.Date(2026, 5, 29, 0, 30, 0, 0, time.UTC)},
				{"clocks/minutely", time.Date(2026, 6, 1, 11, 59, 0, 0, time.UTC)},
				// An older missed tick claimed after a newer one does not
				// move the last tick back.
				{"clocks/minutely", time.Date(2026, 6, 1, 11, 40, 0, 0, time.UTC)},
				// Another flow's schedule of the same name is not ours.
				{"other/beat", time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)},
			}
			for _, c := range claims {
				rec := stores.OutboxRecord{Exchange: "clocks", RoutingKey: "tick", Body: []byte(`{}`)}
				if ok, err := ticks.ClaimTick(t.Context(), c.key, c.tick, rec); err != nil || !ok {
					t.Fatalf("ClaimTick(%s, %s) = %v, %v; want claimed", c.key, c.tick, ok, err)
				}
			}
			for _, f := range []struct{ format, golden string }{{"text", "list.txt.golden"}, {"json", "list.json.golden"}} {
				args := []string{"schedules", "--store", store, "--format", f.format, flow}
				out, errOut, code := cli(t, args...)
				if code != 0 {
					t.Fatalf("acemq-flow schedules --format %s: exit %d\nstderr: %s", f.format, code, errOut)
				}
				golden(t, filepath.Join("testdata/schedules", f.golden), []byte(out))
			}
		})
	}
}

// TestSchedulesJSONCountsAddUp reads the JSON document as a program
// would: for each schedule, the missed ticks a start fires and those it
// gives up make up the missed count.
func TestSchedulesJSONCountsAddUp(t *testing.T) {
	fixSchedulesNow(t)
	st := storetest.OpenSQLite(t, stores.Options{})
	ctx := t.Context()
	for _, key := range []string{"clocks/beat", "clocks/nightly", "clocks/hourly", "clocks/minutely"} {
		if _, err := st.ClaimTick(ctx, key, schedulesAt.Add(-50*time.Hour).Truncate(time.Hour), stores.OutboxRecord{RoutingKey: "q", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := cli(t, "schedules", "--store", "sqlite:"+st.Path(), "--format", "json", writeSchedulesFlow(t))
	if code != 0 {
		t.Fatalf("acemq-flow schedules --format json: exit %d\nstderr: %s", code, errOut)
	}
	var doc struct {
		Schedules []struct {
			Name     string  `json:"name"`
			LastTick *string `json:"last_tick"`
			Missed   int64   `json:"missed"`
			Fired    int64   `json:"missed_fired_on_start"`
			GivenUp  int64   `json:"missed_given_up"`
		} `json:"schedules"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Schedules) != 4 {
		t.Fatalf("acemq-flow schedules --format json printed %d schedules, %v:\n%s", len(doc.Schedules), err, out)
	}
	want := map[string][3]int64{ // missed, fired on start, given up, 50 h down
		"beat":     {17994, 3, 17991},
		"nightly":  {2, 1, 1},
		"hourly":   {49, 0, 49},
		"minutely": {2999, 1, 2998},
	}
	for _, s := range doc.Schedules {
		got := [3]int64{s.Missed, s.Fired, s.GivenUp}
		if got != want[s.Name] || s.LastTick == nil {
			t.Errorf("schedule %s: missed %d, fired on start %d, given up %d, last tick %v; want %v and a last tick", s.Name, got[0], got[1], got[2], s.LastTick, want[s.Name])
		}
	}
}

// TestSchedulesShowsWhatTheLoopClaimed runs the runtimes' schedules loop
// on a SQLite store until it has claimed a tick of an every: 1s schedule,
// stops it, and lists the schedules at the real clock: the last tick is the
// one the loop claimed, nothing is missed, and the next tick follows it.
func TestSchedulesShowsWhatTheLoopClaimed(t *testing.T) {
	st := storetest.OpenSQLite(t, stores.Options{})
	flow := filepath.Join(t.TempDir(), "beat.yaml")
	if err := os.WriteFile(flow, []byte(`version: acemq.flow/v1
name: beat
schedules:
  - name: second
    every: 1s
    send: {exchange: clocks, routing_key: second}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	_, pl, diags := loadAndCompile(streams{err: &stderr}, []string{flow})
	if diags.HasErrors() {
		t.Fatalf("load %s: %v", flow, diags)
	}
	loop, err := scheduler.NewSchedules(scheduler.SchedulesOptions{Plan: pl, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, ok, err := st.LastTick(t.Context(), "beat/second"); err != nil || !ok {
			return testenv.Errorf("LastTick(beat/second) = %v, %v; want a tick claimed by the loop", ok, err)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Schedules.Run returned %v after its context ended, want nil", err)
	}
	last, _, err := st.LastTick(t.Context(), "beat/second")
	if err != nil {
		t.Fatal(err)
	}

	out, errOut, code := cli(t, "schedules", "--store", "sqlite:"+st.Path(), "--format", "json", flow)
	if code != 0 {
		t.Fatalf("acemq-flow schedules --format json: exit %d\nstderr: %s", code, errOut)
	}
	var doc struct {
		Schedules []struct {
			LastTick *string `json:"last_tick"`
			NextTick *string `json:"next_tick"`
			Missed   int64   `json:"missed"`
		} `json:"schedules"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Schedules) != 1 {
		t.Fatalf("acemq-flow schedules --format json printed %d schedules, %v:\n%s", len(doc.Schedules), err, out)
	}
	got := doc.Schedules[0]
	if got.LastTick == nil || *got.LastTick != scheduler.TickText(last) {
		t.Errorf("last_tick = %v, want %s, the tick the loop claimed", got.LastTick, scheduler.TickText(last))
	}
	next, err := time.Parse(time.RFC3339Nano, deref(got.NextTick))
	if err != nil || !next.After(last) || next.Truncate(time.Second) != next {
		t.Errorf("next_tick = %v (%v), want a whole second after the last tick %s", deref(got.NextTick), err, scheduler.TickText(last))
	}
	if got.Missed != 0 {
		t.Errorf("missed = %d right after the loop stopped, want 0", got.Missed)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

func TestSchedulesRefusals(t *testing.T) {
	flow := writeSchedulesFlow(t)
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil { // an empty SQLite database
		t.Fatal(err)
	}
	// A store migrated before the schedule ticks had their table.
	old := storetest.OpenSQLite(t, stores.Options{})
	if _, err := old.DB().ExecContext(t.Context(), `DROP TABLE acemq_schedule_ticks; DELETE FROM acemq_migrations WHERE version >= 3`); err != nil {
		t.Fatal(err)
	}
	noSchedules := "../../examples/flows/fulfilment.yaml"
	unused := filepath.Join(t.TempDir(), "unused.db")
	cases := []struct {
		name string
		args []string
		code int
		want string // on stderr, or on stdout for exit 0
	}{
		{"a store without flows, which the runtime at --admin does not take", []string{"schedules", "--store", "sqlite:" + unused}, 2, "without PATH the runtime at --admin answers from its own store"},
		{"no flows and no runtime at --admin", []string{"schedules", "--admin", "127.0.0.1:1"}, 1, "the runtime's admin API at http://127.0.0.1:1 does not answer"},
		{"an unknown format", []string{"schedules", "--format", "yaml", "--store", "sqlite:" + unused, flow}, 2, `--format must be text or json, not "yaml"`},
		{"the memory store", []string{"schedules", "--store", "memory:", flow}, 2, "the memory store keeps no ticks between runs; name the store the runtimes claim ticks in"},
		{"an unknown scheme, without its password", []string{"schedules", "--store", "mysql://root:s3cret@db/acemq", flow}, 2, `unknown scheme "mysql"`},
		{"a SQLite file that does not exist, which schedules does not create", []string{"schedules", "--store", "sqlite:" + unused, flow}, 1,
			"does not exist; run `acemq-flow migrate` with the same --store or ACEMQ_STORE_URL"},
		{"a store without tables", []string{"schedules", "--store", "sqlite:" + empty, flow}, 1,
			"has no tables yet; run `acemq-flow migrate` with the same --store or ACEMQ_STORE_URL"},
		{"a store without the schedule ticks' table", []string{"schedules", "--store", "sqlite:" + old.Path(), flow}, 1,
			"has schema version 2 and this acemq-flow needs"},
		{"invalid flows", []string{"schedules", "--store", "sqlite:" + unused, "../../spec/testdata/invalid/bad-cron.yaml"}, 1, "the flows are invalid"},
		{"flows without schedules need no store", []string{"schedules", "--store", "sqlite:" + unused, noSchedules}, 0, "the flows have no schedules"},
		{"flows without schedules, in JSON", []string{"schedules", "--store", "sqlite:" + unused, "--format", "json", noSchedules}, 0, `"schedules": []`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := cli(t, tc.args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Errorf("acemq-flow %s: exit %d, want %d and %q\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.code, tc.want, out, errOut)
			}
			if strings.Contains(out+errOut, "s3cret") {
				t.Errorf("acemq-flow %s shows the password:\n%s%s", strings.Join(tc.args, " "), out, errOut)
			}
		})
	}
	if _, err := os.Stat(unused); err == nil {
		t.Error("a refused schedules created its SQLite file")
	}

	t.Run("no store given says the default was read", func(t *testing.T) {
		t.Setenv("ACEMQ_STORE_URL", "")
		t.Chdir(t.TempDir())
		_, errOut, code := cli(t, "schedules", flow)
		want := "the sqlite store sqlite:acemq.db does not exist; run `acemq-flow migrate` with the same --store or ACEMQ_STORE_URL to create it with its tables (or `run --create-schema` in development); no --store or ACEMQ_STORE_URL was given, so the default was read: name the store the runtimes claim ticks in"
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("acemq-flow schedules without --store: exit %d, stderr %q; want 1 and %q", code, errOut, want)
		}
	})
}
