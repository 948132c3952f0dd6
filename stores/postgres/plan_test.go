package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestClaimAndConfirmReadOnlyTheirKeys checks the plans of the claim and
// confirm statements on a table of some thousands of rows, before and after
// it has statistics: each must reach its keys through the primary key, never
// by reading the whole table. On a table this size a join or key list the
// planner is free to plan becomes a sequential scan (cheaper by its cost
// model), which made every batch cost time in proportion to the table.
func TestClaimAndConfirmReadOnlyTheirKeys(t *testing.T) {
	ctx := t.Context()
	s := openMigrated(t)
	// The statistics are the test's to decide: autovacuum stays off.
	if _, err := s.pool.Exec(ctx, "ALTER TABLE acemq_idempotency SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	const rows, batch = 5000, 500
	var keys []string
	var tokens []int64
	for r := range rows / batch {
		reqs := make([]stores.ClaimRequest, batch)
		for i := range reqs {
			reqs[i] = stores.ClaimRequest{Key: fmt.Sprintf("k-%d-%d", r, i)}
		}
		out, err := s.TryClaimBatch(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if r == 0 {
			for i := range 64 {
				keys, tokens = append(keys, reqs[i].Key), append(tokens, int64(out[i].Token))
			}
		}
	}
	now := time.Now()
	owners := make([]string, len(keys))
	exps := make([]time.Time, len(keys))
	for i := range exps {
		exps[i] = now.Add(time.Minute)
	}
	// Before and after the table has statistics: a new store's table has
	// none until autovacuum gets to it.
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := s.pool.Exec(ctx, "ANALYZE acemq_idempotency"); err != nil {
				t.Fatal(err)
			}
		}
		checkPlans(t, s, analyzed, rows, []planCase{
			// Keys that exist: the claim looks their rows up.
			{"claim", claimSQL, []any{keys, owners, exps, now}},
			{"confirm", confirmSQL, []any{keys, tokens, now, now.Add(time.Hour)}},
		})
	}
}

type planCase struct {
	name string
	sql  string
	args []any
}

func checkPlans(t *testing.T, s *Store, analyzed bool, rows int, cases []planCase) {
	t.Helper()
	for _, st := range cases {
		plan, err := explain(t, s, "EXPLAIN "+st.sql, st.args...)
		if err != nil {
			t.Fatalf("EXPLAIN %s: %v", st.name, err)
		}
		if strings.Contains(plan, "Seq Scan on acemq_idempotency") {
			t.Errorf("the %s statement reads the whole table of %d rows (statistics: %v):\n%s", st.name, rows, analyzed, plan)
		}
	}
}

func explain(t *testing.T, s *Store, sql string, args ...any) (string, error) {
	rows, err := s.pool.Query(t.Context(), sql, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", err
		}
		b.WriteString(line + "\n")
	}
	return b.String(), rows.Err()
}

// TestOutboxReadsWalkTheIndexInIDOrder checks the plans of the outbox
// claims, listings and purge on a backlog of 20,000 rows, as the store
// sends them: each must take the first rows of its index (pending, stuck, or
// for the purge the primary key) in id order, never read and sort the whole
// backlog. It covers a table never analyzed (a new store), one analyzed
// while nothing was pending and filled since (a burst after a quiet spell),
// and one with fresh statistics; on the first two the planner, left alone,
// sorts.
func TestOutboxReadsWalkTheIndexInIDOrder(t *testing.T) {
	ctx := t.Context()
	s := openMigrated(t)
	if _, err := s.pool.Exec(ctx, "ALTER TABLE acemq_outbox SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	const backlog = 20000
	fill := func() {
		t.Helper()
		if _, err := s.pool.Exec(ctx, `INSERT INTO acemq_outbox (routing_key, body)
SELECT 'q', convert_to(repeat('x', 1024), 'UTF8') FROM generate_series(1, $1)`, backlog); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	statements := []struct {
		name, sql, index string
		args             []any
	}{
		{"leased claim", leaseClaimSQL, "acemq_outbox_pending", []any{now, 100, "relay", now.Add(time.Minute)}},
		{"locked claim", claimLockedSQL, "acemq_outbox_pending", []any{now, 100, 0}},
		{"locked claim after held batches", claimLockedSQL, "acemq_outbox_pending", []any{now, 100, backlog / 2}},
		{"list pending", listPendingSQL, "acemq_outbox_pending", []any{100}},
		{"list stuck", listStuckSQL, "acemq_outbox_stuck", []any{100}},
		{"purge published", purgePublishedSQL, "acemq_outbox_pkey", []any{0, now, 100}},
	}
	check := func(stats string) {
		t.Helper()
		for _, st := range statements {
			plan := explainInIDOrder(t, s, st.sql, st.args...)
			for _, bad := range []string{"Sort", "Bitmap", "Seq Scan"} {
				if strings.Contains(plan, bad) {
					t.Errorf("%s on a backlog of %d rows (%s): the plan has a %s; want an index scan of %s in id order:\n%s",
						st.name, backlog, stats, bad, st.index, plan)
				}
			}
			if !strings.Contains(plan, "Index Scan using "+st.index) {
				t.Errorf("%s (%s): the plan does not scan %s:\n%s", st.name, stats, st.index, plan)
			}
		}
	}
	fill()
	check("never analyzed")
	exec("UPDATE acemq_outbox SET published_at = now()")
	exec("ANALYZE acemq_outbox")
	fill()
	check("analyzed while nothing was pending")
	exec("ANALYZE acemq_outbox")
	check("fresh statistics")
}

// explainInIDOrder returns the plan of sql as the store runs it: after
// idOrder, in one batch.
func explainInIDOrder(t *testing.T, s *Store, sql string, args ...any) string {
	t.Helper()
	var b strings.Builder
	q := &pgx.Batch{}
	q.Queue(idOrder)
	q.Queue("EXPLAIN "+sql, args...).Query(func(rows pgx.Rows) error {
		var line string
		_, err := pgx.ForEachRow(rows, []any{&line}, func() error {
			b.WriteString(line + "\n")
			return nil
		})
		return err
	})
	if err := s.pool.SendBatch(t.Context(), q).Close(); err != nil {
		t.Fatalf("EXPLAIN %s: %v", sql, err)
	}
	return b.String()
}

// openMigrated opens a store on a schema of the test's own, with its tables.
func openMigrated(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), testenv.PostgresSchema(t), stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestClaimAndConfirmStayOffTheWholeTableAsItGrows runs the claim and confirm
// statements as the store runs them, first many times on a new, small table
// and then on one of some thousands of rows, and counts the table's
// sequential scans. A statement prepared once and run many times gets a
// generic plan from the server after five runs, planned for the table as it
// was then: on a new table the planner takes it for ten pages, and the
// confirm's read by row address cost more than reading those; kept as the
// table grew, every confirm read the whole table (the idempotent hop slowed
// round after round). The statements are planned for each run instead.
func TestClaimAndConfirmStayOffTheWholeTableAsItGrows(t *testing.T) {
	ctx := t.Context()
	// One connection: its statistics are flushed before they are read.
	s, err := Open(ctx, testenv.PostgresSchema(t)+"&pool_max_conns=1", stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// The statistics are the test's to decide: autovacuum stays off.
	if _, err := s.pool.Exec(ctx, "ALTER TABLE acemq_idempotency SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	round := func(r, n int) {
		t.Helper()
		reqs := make([]stores.ClaimRequest, n)
		for i := range reqs {
			reqs[i] = stores.ClaimRequest{Key: fmt.Sprintf("k-%d-%d", r, i)}
		}
		out, err := s.TryClaimBatch(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		held := make([]stores.Held, n)
		for i, o := range out {
			held[i] = stores.Held{Key: reqs[i].Key, Token: o.Token}
		}
		if _, err := s.ConfirmBatch(ctx, held); err != nil {
			t.Fatal(err)
		}
	}
	seqScans := func() int64 {
		t.Helper()
		if _, err := s.pool.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := s.pool.QueryRow(ctx, "SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'acemq_idempotency'::regclass").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for r := range 10 { // small batches on a small table: the server's plans are made here
		round(r, 4)
	}
	for r := 10; r < 30; r++ {
		round(r, 250)
	}
	before := seqScans()
	for r := 30; r < 40; r++ {
		round(r, 64)
	}
	if n := seqScans() - before; n > 0 {
		t.Errorf("10 claim and confirm batches on a table of %d rows read the whole table %d times", 10*4+20*250, n)
	}
}
