package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores/internal/core"
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
	s, err := Open(ctx, testenv.PostgresSchema(t), core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
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
		_, err := s.TryClaimBatch(ctx, []core.ClaimRequest{{Key: "a", Owner: "x", Lease: time.Minute}, {Key: "b", Owner: "x", Lease: time.Minute}})
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
