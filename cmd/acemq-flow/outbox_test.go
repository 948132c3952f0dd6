package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/relay"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/sqlite"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// migratedSQLite returns the store URL of a new, migrated SQLite file.
func migratedSQLite(t *testing.T) (string, *sqlite.Store) {
	t.Helper()
	st := storetest.OpenSQLite(t, stores.Options{})
	return "sqlite:" + st.Path(), st
}

func addRecord(t *testing.T, st *sqlite.Store, rec stores.OutboxRecord) {
	t.Helper()
	tx, err := st.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Outbox().Add(t.Context(), tx, rec); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestOutboxListEmptyStore(t *testing.T) {
	store, _ := migratedSQLite(t)
	for _, tc := range []struct{ flag, want string }{
		{"", "no pending outbox records\n"},
		{"--stuck", "no stuck outbox records\n"},
	} {
		args := []string{"outbox", "list", "--store", store}
		if tc.flag != "" {
			args = append(args, tc.flag)
		}
		out, errOut, code := cli(t, args...)
		if code != 0 || out != tc.want {
			t.Errorf("acemq-flow %s: exit %d, stdout %q, want 0 and %q\nstderr: %s", strings.Join(args, " "), code, out, tc.want, errOut)
		}
	}
}

func TestOutboxListShowsRecordsWithoutTheirBodies(t *testing.T) {
	store, st := migratedSQLite(t)
	body := []byte("\x1b[31mred\x1b[0m and then a long tail that must never be printed in full: SECRET-TAIL")
	addRecord(t, st, stores.OutboxRecord{Exchange: "orders", RoutingKey: "order.placed", Body: body,
		Properties: stores.Properties{MessageID: "o-1"}})
	addRecord(t, st, stores.OutboxRecord{RoutingKey: "audit", Body: []byte(`{"n":1}`)})

	out, errOut, code := cli(t, "outbox", "list", "--store", store)
	if code != 0 {
		t.Fatalf("outbox list: exit %d\nstderr: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("outbox list printed %d lines, want a header and 2 records:\n%s", len(lines), out)
	}
	for _, w := range []string{"orders", "order.placed", `\u001b[31mred`, "…", "(default)", "audit", `{"n":1}`} {
		if !strings.Contains(out, w) {
			t.Errorf("outbox list lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "SECRET-TAIL") || strings.Contains(out, "\x1b") {
		t.Errorf("outbox list printed the whole body or a raw escape sequence:\n%q", out)
	}
	out, _, _ = cli(t, "outbox", "list", "--store", store, "--limit", "1")
	if n := len(strings.Split(strings.TrimSpace(out), "\n")); n != 2 {
		t.Errorf("outbox list --limit 1 printed %d lines, want a header and 1 record:\n%s", n, out)
	}
}

// TestOutboxListStuckAfterRelay relays a record nothing is bound to
// receive until the store stops handing it out, then finds it with
// `outbox list --stuck`.
func TestOutboxListStuckAfterRelay(t *testing.T) {
	amqpURL := testenv.AMQP(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "acemq.db")
	st, err := sqlite.Open(t.Context(), path, stores.Options{OutboxMaxAttempts: 2, OutboxRetryDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The default exchange routes to a queue of that name; there is none.
	addRecord(t, st, stores.OutboxRecord{RoutingKey: testenv.Names(t) + "-nowhere", Body: []byte(`{}`),
		Properties: stores.Properties{MessageID: "o-stuck"}})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx, amqpURL, st, relay.Options{Poll: 5 * time.Millisecond}) }()
	testenv.Eventually(t, 30*time.Second, func() error {
		recs, err := st.ListStuck(context.Background(), 0)
		if err != nil || len(recs) != 1 {
			return testenv.Errorf("%d stuck records (%v), want 1", len(recs), err)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunRelay: %v", err)
	}

	out, errOut, code := cli(t, "outbox", "list", "--stuck", "--store", "sqlite:"+path)
	if code != 0 || !strings.Contains(out, "-nowhere") || !strings.Contains(out, "reached no queue") {
		t.Fatalf("outbox list --stuck: exit %d, want 0 and the unroutable record\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if fields := strings.Fields(strings.Split(out, "\n")[1]); len(fields) < 4 || fields[3] != "2" {
		t.Errorf("outbox list --stuck: attempts column of %q, want 2", strings.Split(out, "\n")[1])
	}
	if out, _, _ := cli(t, "outbox", "list", "--store", "sqlite:"+path); out != "no pending outbox records\n" {
		t.Errorf("outbox list after the record got stuck: %q, want no pending records", out)
	}
}

func TestOutboxAge(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"}, {45 * time.Second, "45s"}, {12 * time.Minute, "12m"}, {3 * time.Hour, "3h"}, {72 * time.Hour, "3d"},
	}
	for _, tc := range cases {
		if got := outboxAge(tc.d); got != tc.want {
			t.Errorf("outboxAge(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
