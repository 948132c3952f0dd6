package sqlite

import (
	"database/sql"
	"slices"
	"strings"
	"testing"
)

// TestOutboxPlans runs EXPLAIN QUERY PLAN on the relay's statements after
// ANALYZE has seen the outbox in the states that mislead the planner: a
// backlog pending, or a pile of stuck rows, makes a partial index look as
// large as the table. Each statement must still walk its index; a bare scan
// of acemq_outbox would read every published row while holding the write
// lock.
func TestOutboxPlans(t *testing.T) {
	s := openMigrated(t)
	stmts := []struct {
		name, sql, index string
		args             []any
	}{
		{"ClaimBatch", outboxClaimSQL, "acemq_outbox_pending", []any{"relay", int64(2000), int64(1000), 100}},
		{"ListPending", outboxPendingSQL, "acemq_outbox_pending", []any{100}},
		{"ListStuck", outboxStuckSQL, "acemq_outbox_stuck", []any{100}},
	}
	states := []struct {
		name   string
		update string
	}{
		{"analyzed with 5000 rows pending", ``},
		{"analyzed with 4000 of 5000 rows stuck", `UPDATE acemq_outbox SET stuck_at = 1 WHERE id <= 4000`},
		{"analyzed with 4800 of 5000 rows published", `UPDATE acemq_outbox SET stuck_at = NULL, published_at = 1 WHERE id <= 4800`},
	}
	for _, stmt := range stmts {
		if !strings.Contains(stmt.sql, " INDEXED BY "+stmt.index) {
			t.Errorf("%s does not name its index: want INDEXED BY %s in %q", stmt.name, stmt.index, stmt.sql)
		}
	}
	exec(t, s.db, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
INSERT INTO acemq_outbox (body) SELECT x'' FROM n`)
	// misled records, for each statement, whether the statistics of some
	// state made the planner scan the table when the statement does not
	// name its index: without that, this test would pass without INDEXED BY.
	misled := map[string]bool{}
	for _, st := range states {
		if st.update != "" {
			exec(t, s.db, st.update)
		}
		exec(t, s.db, `ANALYZE`)
		for _, stmt := range stmts {
			plan := queryPlan(t, s.db, stmt.sql, stmt.args)
			if slices.Contains(plan, "SCAN acemq_outbox") || !slices.ContainsFunc(plan, usesIndex(stmt.index)) {
				t.Errorf("%s: EXPLAIN QUERY PLAN of %s = %q, want it to walk %s and never scan acemq_outbox",
					st.name, stmt.name, plan, stmt.index)
			}
			bare := strings.Replace(stmt.sql, " INDEXED BY "+stmt.index, "", 1)
			if slices.Contains(queryPlan(t, s.db, bare, stmt.args), "SCAN acemq_outbox") {
				misled[stmt.name] = true
			}
		}
	}
	for _, stmt := range stmts {
		if !misled[stmt.name] && strings.Contains(stmt.sql, " INDEXED BY "+stmt.index) {
			t.Errorf("%s without INDEXED BY walked %s in every state, want some state's statistics to make it scan acemq_outbox, so that this test covers the index hint",
				stmt.name, stmt.index)
		}
	}
}

func usesIndex(index string) func(string) bool {
	return func(detail string) bool {
		return strings.HasSuffix(detail, "USING INDEX "+index) || strings.HasSuffix(detail, "USING COVERING INDEX "+index)
	}
}

// queryPlan returns the detail column of EXPLAIN QUERY PLAN for query.
func queryPlan(t *testing.T, db *sql.DB, query string, args []any) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN %s: %v", query, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notUsed int
		var detail string
		if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

func exec(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}
