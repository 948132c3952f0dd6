package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores/internal/purgecheck"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestPurgeNeverDeadlocksWithClaims sets up the lock orders that made a
// purge and a claim taking over expired rows deadlock: expired rows b, c, a
// (in that order on disk and by expiry), c locked by a third session, the
// purge started, then a claim of a and b (which locks in key order: a, then
// b), then c released. A purge that waits for row locks deletes b, waits
// for c, and once c is free waits for a, which the claim holds while it
// waits for b: PostgreSQL aborts one of them. Both must succeed.
func TestPurgeNeverDeadlocksWithClaims(t *testing.T) {
	ctx := t.Context()
	s := openMigrated(t)
	now := time.Now()
	for i, key := range []string{"b", "c", "a"} {
		exp := now.Add(time.Duration(i-3) * time.Hour)
		if _, err := s.pool.Exec(ctx, `INSERT INTO acemq_idempotency (key, state, token, claimed_at, expires_at)
VALUES ($1, 'claimed', nextval('acemq_idempotency_token'), $2, $2)`, key, exp); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1 FROM acemq_idempotency WHERE key = 'c' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	purged := make(chan error, 1)
	go func() {
		_, err := s.PurgeExpired(ctx)
		purged <- err
	}()
	waitBlockedOrDone(t, s, purged, "DELETE FROM acemq_idempotency%")
	claimed := make(chan error, 1)
	go func() {
		_, err := s.TryClaimBatch(ctx, []stores.ClaimRequest{{Key: "a", Owner: "x", Lease: time.Minute}, {Key: "b", Owner: "x", Lease: time.Minute}})
		claimed <- err
	}()
	waitBlockedOrDone(t, s, claimed, "%INSERT INTO acemq_idempotency%")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for what, ch := range map[string]chan error{"purge": purged, "claim": claimed} {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("%s failed: %v", what, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not return within 30s", what)
		}
	}
	// The row the purge skipped while it was locked goes with the next one.
	if n, err := s.PurgeExpired(ctx); err != nil || n != 1 {
		t.Errorf("the second purge removed %d rows (%v), want 1 (c)", n, err)
	}
}

// waitBlockedOrDone waits until the statement matching like is waiting for
// a lock, or has returned (its result is put back on done).
func waitBlockedOrDone(t *testing.T, s *Store, done chan error, like string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		select {
		case err := <-done:
			done <- err
			return nil
		default:
		}
		var n int
		if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE $1 AND datname = current_database()`, like).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no statement like %q waits for a lock yet", like)
		}
		return nil
	})
}

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
		if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	exec(`INSERT INTO acemq_idempotency (key, state, token, claimed_at, expires_at)
SELECT 'k' || g, 'confirmed', g, $1::timestamptz, $1::timestamptz + CASE WHEN g <= 30 THEN interval '-1 hour' ELSE interval '1 hour' END
FROM generate_series(1, 40) g`, now)
	if n, err := s.PurgeExpired(ctx); err != nil || n != 30 {
		t.Fatalf("PurgeExpired = %d, %v; want the 30 expired rows", n, err)
	}
	var left int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM acemq_idempotency WHERE expires_at <= $1`, now).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d expired rows left (%v), want 0", left, err)
	}

	// Outbox rows 1-40, written two hours ago: 1-25 published two hours ago,
	// 26-30 published just now, 31-35 stuck, 36-40 pending. Then rows 41-50,
	// written now (published "two hours ago", which a real relay cannot do:
	// it shows where the walk stops).
	old := now.Add(-2 * time.Hour)
	exec(`INSERT INTO acemq_outbox (routing_key, body, created_at, published_at, stuck_at)
SELECT 'q', '\x00', $1::timestamptz,
    CASE WHEN g <= 25 THEN $1::timestamptz WHEN g <= 30 THEN $2::timestamptz END,
    CASE WHEN g BETWEEN 31 AND 35 THEN $1::timestamptz END
FROM generate_series(1, 40) g ORDER BY g`, old, now)
	exec(`INSERT INTO acemq_outbox (routing_key, body, created_at, published_at)
SELECT 'q', '\x00', $1, $2 FROM generate_series(41, 50) g ORDER BY g`, now, old)
	n, err := s.PurgePublished(ctx, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// The schema is the test's own: ids count from 1.
	kept := map[int64]bool{}
	rows, err := s.pool.Query(ctx, `SELECT id FROM acemq_outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var row int64
		if err := rows.Scan(&row); err != nil {
			t.Fatal(err)
		}
		kept[row] = true
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	purgecheck.CheckPurgeWalk(t, n, kept)
}
