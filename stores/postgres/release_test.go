package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/stores"
)

// TestFailedClaimBatchReleasesWhatItClaimed fails a claim batch after its
// claim statement committed: key b is being inserted by another session, so
// the statement claims a and finds b hidden from its snapshot, and the
// look-up of b then waits behind a table lock until the batch's deadline.
// The caller is told only of the failure and holds no token: the claim of a
// must be released, or a's own retries would find it in progress until its
// lease ended.
func TestFailedClaimBatchReleasesWhatItClaimed(t *testing.T) {
	ctx := t.Context()
	s := openMigrated(t)
	claimCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	claimed := make(chan error, 1)
	ltx := hideBehindLock(t, s, claimed, func() {
		_, err := s.TryClaimBatch(claimCtx, []stores.ClaimRequest{{Key: "a", Owner: "me", Lease: time.Hour}, {Key: "b", Owner: "me", Lease: time.Hour}})
		claimed <- err
	})
	<-claimCtx.Done()
	// The look-up failed at the deadline; the release of a now waits for
	// the lock (or, without it, the batch has returned).
	waitBlockedOrDone(t, s, claimed, "%DELETE FROM acemq_idempotency%")
	if err := ltx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-claimed:
		if err == nil {
			t.Fatal("TryClaimBatch succeeded; want the look-up's failure")
		}
		t.Logf("TryClaimBatch: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("TryClaimBatch did not return within 30s")
	}
	c, err := s.TryClaim(ctx, stores.ClaimRequest{Key: "a", Owner: "me", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if c.State != stores.Claimed {
		t.Fatalf("claiming a after the failed batch: %v, want claimed (the failed batch's claim released)", c.State)
	}
}

// TestAKeyThatKeepsVanishingIsInProgress makes key b vanish between the
// claim statement and the look-up (inserted by another session, hidden from
// the statement's snapshot, then deleted while the look-up waits behind a
// table lock) as often as the store retries it. b is answered in progress
// (its delivery comes round and claims then) and a keeps its claim. Before,
// the whole batch failed over b, and a's claim, taken, stayed held by
// nobody until its lease ended.
func TestAKeyThatKeepsVanishingIsInProgress(t *testing.T) {
	ctx := t.Context()
	s := openMigrated(t)
	old := maxClaimRounds
	maxClaimRounds = 1
	t.Cleanup(func() { maxClaimRounds = old })
	type result struct {
		claims []stores.Claim
		err    error
	}
	claimed := make(chan result, 1)
	blocked := make(chan error, 1) // never sent on: the batch waits behind the lock
	ltx := hideBehindLock(t, s, blocked, func() {
		c, err := s.TryClaimBatch(ctx, []stores.ClaimRequest{{Key: "a", Owner: "me", Lease: time.Hour}, {Key: "b", Owner: "me", Lease: time.Hour}})
		claimed <- result{c, err}
	})
	// b is gone when the look-up runs.
	waitBlockedOrDone(t, s, blocked, "SELECT key, state, owner, expires_at FROM acemq_idempotency%")
	if _, err := ltx.Exec(ctx, `DELETE FROM acemq_idempotency WHERE key = 'b'`); err != nil {
		t.Fatal(err)
	}
	if err := ltx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-claimed:
	case <-time.After(30 * time.Second):
		t.Fatal("TryClaimBatch did not return within 30s")
	}
	if r.err != nil || len(r.claims) != 2 || r.claims[0].State != stores.Claimed || r.claims[1].State != stores.InProgress {
		t.Fatalf("TryClaimBatch(a, b) = %+v, %v; want a claimed and b in progress", r.claims, r.err)
	}
}

// hideBehindLock runs claim (a batch claiming a and b) while another
// session inserts b, so that the claim statement commits a and finds b
// hidden from its snapshot, and its look-up of b then queues behind an
// ACCESS EXCLUSIVE lock on the table, held by the transaction returned.
// done is where claim reports, so that a wait can see it end early.
func hideBehindLock(t *testing.T, s *Store, done chan error, claim func()) pgx.Tx {
	t.Helper()
	ctx := t.Context()
	inserter, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inserter.Release)
	itx, err := inserter.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = itx.Rollback(context.Background()) })
	if _, err := itx.Exec(ctx, `INSERT INTO acemq_idempotency (key, state, token, owner, claimed_at, expires_at)
VALUES ('b', 'claimed', nextval('acemq_idempotency_token'), 'other', now(), now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	go claim()
	waitBlockedOrDone(t, s, done, "%INSERT INTO acemq_idempotency%")

	locker, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(locker.Release)
	ltx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ltx.Rollback(context.Background()) })
	locked := make(chan error, 1)
	go func() {
		_, err := ltx.Exec(ctx, `LOCK TABLE acemq_idempotency IN ACCESS EXCLUSIVE MODE`)
		locked <- err
	}()
	waitBlockedOrDone(t, s, locked, "LOCK TABLE acemq_idempotency%")
	// b commits: the claim statement ends with b hidden, and the look-up
	// queues behind the table lock.
	if err := itx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	return ltx
}
