package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/scheduler"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestSchedulesFromTheRunningRuntime runs a runtime with an every: 1s
// schedule on a SQLite store, with its admin API behind a token, until its
// loop has claimed a tick, and lists the schedules without PATH: the
// runtime answers (GET /v1/schedules) with the schedule it runs, the tick
// its store holds and the next one; the same listing with PATH and the
// store agrees; and, as a read of the status page, it needs no token.
func TestSchedulesFromTheRunningRuntime(t *testing.T) {
	t.Setenv("ACEMQ_ADMIN_TOKEN", "")
	url := testenv.VHost(t)
	st := storetest.OpenSQLite(t, stores.Options{})
	const flow = `version: acemq.flow/v1
name: beat
schedules:
  - name: second
    every: 1s
    missed: all
    send: {exchange: clocks, routing_key: second}
`
	rt, pl := runtimetest.Start(t, url, flow, runtime.Options{Schedules: st})
	addr := runtimetest.AdminWith(t, admin.Options{Token: "tk", Runtime: rt, Plan: pl, Metrics: rt.Metrics(), Ticks: st})
	testenv.Eventually(t, 15*time.Second, func() error {
		if _, ok, err := st.LastTick(t.Context(), "beat/second"); err != nil || !ok {
			return testenv.Errorf("LastTick(beat/second) = %v, %v; want a tick claimed by the runtime's loop", ok, err)
		}
		return nil
	})

	out, errOut, code := cli(t, "schedules", "--admin", addr, "--admin-token", "tk", "--format", "json")
	if code != 0 {
		t.Fatalf("acemq-flow schedules --admin %s --format json: exit %d\nstderr: %s", addr, code, errOut)
	}
	var v scheduler.View
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Schedules) != 1 {
		t.Fatalf("acemq-flow schedules --admin: %d schedules (%v), want 1:\n%s", len(v.Schedules), err, out)
	}
	got := v.Schedules[0]
	if got.Flow != "beat" || got.Name != "second" || got.Every != "1s" || got.MissedPolicy != "all" || got.Send != "exchange clocks key second" {
		t.Errorf("acemq-flow schedules --admin: schedule %+v, want beat/second every 1s, missed all, to exchange clocks key second", got)
	}
	if got.LastTick == nil || got.NextTick == nil {
		t.Fatalf("acemq-flow schedules --admin: last tick %v, next tick %v; want both", got.LastTick, got.NextTick)
	}
	last, err1 := time.Parse(time.RFC3339Nano, *got.LastTick)
	next, err2 := time.Parse(time.RFC3339Nano, *got.NextTick)
	if err1 != nil || err2 != nil || !next.After(last) {
		t.Errorf("acemq-flow schedules --admin: last tick %s, next tick %s; want RFC 3339 times, the next after the last", *got.LastTick, *got.NextTick)
	}
	if stored, _, _ := st.LastTick(t.Context(), "beat/second"); last.After(stored) {
		t.Errorf("acemq-flow schedules --admin: last tick %s is after the store's %s", last, stored)
	}
	if got.Missed != 0 {
		t.Errorf("acemq-flow schedules --admin: %d ticks missed while the runtime runs, want 0", got.Missed)
	}

	text, errOut, code := cli(t, "schedules", "--admin", addr, "--admin-token", "tk")
	if code != 0 || !strings.Contains(text, "FLOW") || !strings.Contains(text, "every 1s") || !strings.Contains(text, "all within 24h0m0s") {
		t.Errorf("acemq-flow schedules --admin (text): exit %d\n%s%s\nwant the table with beat/second", code, text, errOut)
	}

	// With PATH, the same schedule and, from the same store, a last tick
	// no older than the runtime's answer.
	path := filepath.Join(t.TempDir(), "beat.yaml")
	if err := os.WriteFile(path, []byte(flow), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = cli(t, "schedules", "--store", "sqlite:"+st.Path(), "--format", "json", path)
	var fromStore scheduler.View
	if code != 0 || json.Unmarshal([]byte(out), &fromStore) != nil || len(fromStore.Schedules) != 1 || fromStore.Schedules[0].LastTick == nil {
		t.Fatalf("acemq-flow schedules --store … %s: exit %d\n%s%s", path, code, out, errOut)
	}
	if again, _ := time.Parse(time.RFC3339Nano, *fromStore.Schedules[0].LastTick); again.Before(last) {
		t.Errorf("acemq-flow schedules with PATH: last tick %s, before the runtime's answer %s", again, last)
	}

	// The listing is one of the status page's reads, which need no token:
	// they change nothing.
	out, errOut, code = cli(t, "schedules", "--admin", addr, "--format", "json")
	var open scheduler.View
	if code != 0 || json.Unmarshal([]byte(out), &open) != nil || len(open.Schedules) != 1 {
		t.Errorf("acemq-flow schedules --admin without the token: exit %d\n%s%s\nwant the listing", code, out, errOut)
	}
}
