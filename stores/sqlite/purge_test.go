package sqlite

import (
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores/internal/purgecheck"
)

// TestPurgesWorkInBatches purges more rows than one statement handles: the
// idempotency purge takes every expired row, the outbox purge every row
// published before the cut-off (none pending, stuck or published after it),
// and the outbox purge's walk ends at the first row written after the
// cut-off.
func TestPurgesWorkInBatches(t *testing.T) {
	ctx := t.Context()
	s := openMigrated(t)
	purgecheck.SetBatch(t, 7)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.db.ExecContext(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UnixMilli()
	hour := time.Hour.Milliseconds()
	for g := 1; g <= 40; g++ {
		exp := now + hour
		if g <= 30 {
			exp = now - hour
		}
		exec(`INSERT INTO acemq_idempotency (key, state, token, claimed_at, expires_at) VALUES (?, 'confirmed', ?, ?, ?)`,
			"k"+string(rune('A'+g)), g, now, exp)
	}
	if n, err := s.PurgeExpired(ctx); err != nil || n != 30 {
		t.Fatalf("PurgeExpired = %d, %v; want the 30 expired rows", n, err)
	}

	// Outbox rows 1-40, written two hours ago: 1-25 published two hours ago,
	// 26-30 published just now, 31-35 stuck, 36-40 pending. Then rows 41-50,
	// written now (published "two hours ago", which a real relay cannot do:
	// it shows where the walk stops).
	twoHoursAgo := now - 2*hour
	for g := 1; g <= 50; g++ {
		created, published, stuck := any(twoHoursAgo), any(nil), any(nil)
		switch {
		case g <= 25:
			published = twoHoursAgo
		case g <= 30:
			published = now
		case g <= 35:
			stuck = twoHoursAgo
		case g > 40:
			created, published = now, twoHoursAgo
		}
		exec(`INSERT INTO acemq_outbox (id, routing_key, body, created_at, published_at, stuck_at) VALUES (?, 'q', x'00', ?, ?, ?)`,
			g, created, published, stuck)
	}
	n, err := s.PurgePublished(ctx, time.UnixMilli(now-hour))
	if err != nil {
		t.Fatal(err)
	}
	kept := map[int64]bool{}
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM acemq_outbox`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		kept[id] = true
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	purgecheck.CheckPurgeWalk(t, n, kept)
}
