package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores/internal/core"
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
	s, err := Open(ctx, testenv.PostgresSchema(t), core.Options{})
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
	const rows, batch = 5000, 500
	var keys []string
	var tokens []int64
	for r := range rows / batch {
		reqs := make([]core.ClaimRequest, batch)
		for i := range reqs {
			reqs[i] = core.ClaimRequest{Key: fmt.Sprintf("k-%d-%d", r, i)}
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
