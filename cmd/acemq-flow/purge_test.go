package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/sqlite"
	"github.com/acemq/acemq-flow/stores/storetest"
)

// purgeFixture is a migrated store for the purge tests, on one backend.
type purgeFixture struct {
	url string
	// open opens another handle on the store with opts, closed by the
	// test's cleanup.
	open func(t *testing.T, opts stores.Options) stores.Set
	// insert writes an outbox row with plain SQL, as another program could,
	// with these times (zero: NULL), and returns its id.
	insert func(t *testing.T, created, published, stuck time.Time) int64
}

func sqlitePurgeFixture(t *testing.T) purgeFixture {
	st := storetest.OpenSQLite(t, stores.Options{})
	db, err := sql.Open("sqlite", sqlite.DSN(st.Path(), 5000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ms := func(at time.Time) any {
		if at.IsZero() {
			return nil
		}
		return at.UnixMilli()
	}
	return purgeFixture{
		url: "sqlite:" + st.Path(),
		open: func(t *testing.T, opts stores.Options) stores.Set {
			s, err := sqlite.Open(t.Context(), st.Path(), opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		insert: func(t *testing.T, created, published, stuck time.Time) int64 {
			var id int64
			err := db.QueryRowContext(t.Context(), `INSERT INTO acemq_outbox (routing_key, body, created_at, published_at, stuck_at)
VALUES ('q', x'00', ?, ?, ?) RETURNING id`, ms(created), ms(published), ms(stuck)).Scan(&id)
			if err != nil {
				t.Fatal(err)
			}
			return id
		},
	}
}

func postgresPurgeFixture(t *testing.T) purgeFixture {
	st, url := storetest.OpenPostgresSchema(t, stores.Options{})
	orNull := func(at time.Time) any {
		if at.IsZero() {
			return nil
		}
		return at
	}
	return purgeFixture{
		url: url,
		open: func(t *testing.T, opts stores.Options) stores.Set {
			return storetest.OpenPostgresURL(t, url, opts)
		},
		insert: func(t *testing.T, created, published, stuck time.Time) int64 {
			var id int64
			err := st.Pool().QueryRow(t.Context(), `INSERT INTO acemq_outbox (routing_key, body, created_at, published_at, stuck_at)
VALUES ('q', '\x00'::bytea, $1, $2, $3) RETURNING id`, created, orNull(published), orNull(stuck)).Scan(&id)
			if err != nil {
				t.Fatal(err)
			}
			return id
		},
	}
}

// TestPurgeDeletesWhatTheStoreNoLongerKeeps runs `acemq-flow purge` on
// each backend: expired claims and old confirmations go, outbox records
// published before the published retention go, and everything else stays.
func TestPurgeDeletesWhatTheStoreNoLongerKeeps(t *testing.T) {
	backends := []struct {
		name    string
		fixture func(t *testing.T) purgeFixture
	}{
		{"sqlite", sqlitePurgeFixture},
		{"postgres", postgresPurgeFixture}, // skipped without ACEMQ_TEST_POSTGRES_URL
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			f := b.fixture(t)
			ctx := t.Context()
			now := time.Now()
			day := 24 * time.Hour

			// A month ago: a claim never confirmed and a confirmation, both
			// long expired. Now: a confirmation within its retention.
			old := f.open(t, stores.Options{Now: func() time.Time { return now.Add(-30 * day) }})
			if _, err := old.TryClaim(ctx, stores.ClaimRequest{Key: "abandoned"}); err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"old", "recent"} {
				s := old
				if key == "recent" {
					s = f.open(t, stores.Options{})
				}
				c, err := s.TryClaim(ctx, stores.ClaimRequest{Key: key})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Confirm(ctx, key, c.Token); err != nil {
					t.Fatal(err)
				}
			}
			// Schedule ticks: two of a month ago and today's of one
			// schedule (its older two go), and another's only tick, a month
			// old, which stays: it is where that schedule stopped.
			claimed := map[string][]time.Time{
				"shop/nightly": {now.Add(-31 * day), now.Add(-30 * day), now.Add(-time.Hour)},
				"shop/monthly": {now.Add(-30 * day)},
			}
			for key, ticks := range claimed {
				for _, tick := range ticks {
					if ok, err := old.ClaimTick(ctx, key, tick, stores.OutboxRecord{RoutingKey: "q", Body: []byte(`{}`)}); err != nil || !ok {
						t.Fatalf("ClaimTick(%s, %s) = %v, %v; want claimed", key, tick, ok, err)
					}
				}
			}
			// Each claimed tick wrote its firing's outbox record, pending.
			var tickRecords []int64
			if recs, err := old.ListPending(ctx, 0); err == nil {
				for _, r := range recs {
					tickRecords = append(tickRecords, r.ID)
				}
			} else {
				t.Fatal(err)
			}
			// Saga instances: one ended a month ago goes; one ended today
			// and one still running since a month ago stay.
			sagaAt := func(s stores.Set, id string, end stores.SagaState) {
				t.Helper()
				inst, _, err := s.CreateSaga(ctx, stores.SagaInstance{Saga: "place-order", ID: id, State: stores.SagaRunning, Input: []byte(`{}`)})
				if err != nil {
					t.Fatal(err)
				}
				if end != stores.SagaRunning {
					inst.State = end
					if _, err := s.AdvanceSaga(ctx, inst); err != nil {
						t.Fatal(err)
					}
				}
			}
			sagaAt(old, "ended-long-ago", stores.SagaCompleted)
			sagaAt(old, "running-long", stores.SagaRunning)
			sagaAt(f.open(t, stores.Options{}), "ended-today", stores.SagaCompensated)
			written := now.Add(-10 * day)
			longPublished := f.insert(t, written, now.Add(-9*day), time.Time{})
			published := f.insert(t, written, now.Add(-day), time.Time{})
			stuck := f.insert(t, written, time.Time{}, now.Add(-9*day))
			pending := f.insert(t, written, time.Time{}, time.Time{})

			purge := func(want []string, args ...string) {
				t.Helper()
				args = append([]string{"purge", "--store", f.url}, args...)
				out, errOut, code := cli(t, args...)
				for _, w := range want {
					if code != 0 || !strings.Contains(out, w) {
						t.Fatalf("acemq-flow %s: exit %d, stdout:\n%swant exit 0 and %q\nstderr: %s", strings.Join(args, " "), code, out, w, errOut)
					}
				}
			}
			purge([]string{"acemq_idempotency: deleted 2 expired claims and confirmations\n" +
				"acemq_outbox: deleted 1 record published before ",
				"acemq_schedule_ticks: deleted 2 ticks claimed before ",
				"acemq_sagas: deleted 1 saga instance ended before "})
			purge([]string{"acemq_idempotency: deleted 0 expired claims and confirmations\n" +
				"acemq_outbox: deleted 0 records published before ",
				"acemq_schedule_ticks: deleted 0 ticks claimed before ",
				"acemq_sagas: deleted 0 saga instances ended before "})
			purge([]string{"acemq_outbox: deleted 1 record published before "}, "--published-retention", "12h")

			s := f.open(t, stores.Options{})
			for key, ticks := range claimed {
				if last, ok, err := s.LastTick(ctx, key); err != nil || !ok || !last.Equal(ticks[len(ticks)-1].Truncate(time.Millisecond)) {
					t.Errorf("LastTick(%s) after the purges = %s, %v, %v; want %s: each schedule's latest tick stays", key, last, ok, err, ticks[len(ticks)-1])
				}
			}
			sagas, err := s.ListSagas(ctx, stores.SagaFilter{})
			var ids []string
			for _, inst := range sagas {
				ids = append(ids, inst.ID)
			}
			slices.Sort(ids)
			if want := []string{"ended-today", "running-long"}; err != nil || !slices.Equal(ids, want) {
				t.Errorf("ListSagas after the purges = %v, %v; want %v", ids, err, want)
			}
			for key, want := range map[string]stores.ClaimState{"abandoned": stores.Claimed, "old": stores.Claimed, "recent": stores.AlreadyConfirmed} {
				if c, err := s.TryClaim(ctx, stores.ClaimRequest{Key: key}); err != nil || c.State != want {
					t.Errorf("TryClaim(%s) after the purges = %v, %v; want %v", key, c.State, err, want)
				}
			}
			for _, l := range []struct {
				name string
				list func() ([]stores.OutboxRecord, error)
				want []int64
			}{
				{"ListPending", func() ([]stores.OutboxRecord, error) { return s.ListPending(ctx, 0) }, append(tickRecords, pending)},
				{"ListStuck", func() ([]stores.OutboxRecord, error) { return s.ListStuck(ctx, 0) }, []int64{stuck}},
			} {
				recs, err := l.list()
				var got []int64
				for _, r := range recs {
					got = append(got, r.ID)
				}
				if err != nil || !slices.Equal(got, l.want) {
					t.Errorf("%s after the purges = %v, %v; want %v (rows %d and %d published)", l.name, got, err, l.want, longPublished, published)
				}
			}
		})
	}
}

func TestPurgePrintsTheCutOff(t *testing.T) {
	f := sqlitePurgeFixture(t)
	before := time.Now().Add(-48 * time.Hour).UTC().Truncate(time.Second)
	out, errOut, code := cli(t, "purge", "--store", f.url, "--published-retention", "48h")
	after := time.Now().Add(-48 * time.Hour).UTC()
	if code != 0 {
		t.Fatalf("acemq-flow purge: exit %d\nstderr: %s", code, errOut)
	}
	_, rest, ok := strings.Cut(out, "published before ")
	stamp, tail, _ := strings.Cut(rest, " ")
	tail, _, _ = strings.Cut(tail, "\n")
	tail += "\n"
	cut, err := time.Parse(time.RFC3339, stamp)
	if !ok || err != nil || cut.Before(before) || cut.After(after) || tail != "(more than 48h0m0s ago)\n" {
		t.Errorf("acemq-flow purge --published-retention 48h printed %q; want the cut-off, now less 48h, in RFC 3339, then (more than 48h0m0s ago)", out)
	}
}

func TestPurgeRefusals(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil { // an empty SQLite database
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		want string // on stderr, or on stdout for exit 0
	}{
		{"a zero published retention", []string{"purge", "--store", "sqlite:x.db", "--published-retention", "0s"}, 2,
			"--published-retention must be a positive duration (168h, say), not 0s"},
		{"a negative published retention", []string{"purge", "--store", "sqlite:x.db", "--published-retention", "-1h"}, 2,
			"--published-retention must be a positive duration"},
		{"an unknown scheme, without its password", []string{"purge", "--store", "mysql://root:s3cret@db/acemq"}, 2,
			`store URL has the unknown scheme "mysql"`},
		{"an argument", []string{"purge", "extra"}, 2, "unknown command"},
		{"a store without tables", []string{"purge", "--store", "sqlite:" + empty}, 1,
			"has no tables yet; run `acemq-flow migrate` with the same --store or ACEMQ_STORE_URL"},
		{"a SQLite file that does not exist, which purge does not create", []string{"purge", "--store", "sqlite:" + filepath.Join(t.TempDir(), "none.db")}, 1,
			"does not exist"},
		{"the memory store", []string{"purge", "--store", "memory:"}, 0, "nothing to purge"},
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
	if _, err := os.Stat("x.db"); err == nil {
		t.Error("a refused purge created x.db")
	}
}
