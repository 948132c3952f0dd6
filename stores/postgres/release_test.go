package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores/internal/core"
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
	inserter, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inserter.Release()
	itx, err := inserter.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer itx.Rollback(context.Background())
	if _, err := itx.Exec(ctx, `INSERT INTO acemq_idempotency (key, state, token, owner, claimed_at, expires_at)
VALUES ('b', 'claimed', nextval('acemq_idempotency_token'), 'other', now(), now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}

	claimCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	claimed := make(chan error, 1)
	go func() {
		_, err := s.TryClaimBatch(claimCtx, []core.ClaimRequest{{Key: "a", Owner: "me", Lease: time.Hour}, {Key: "b", Owner: "me", Lease: time.Hour}})
		claimed <- err
	}()
	waitBlockedOrDone(t, s, claimed, "%INSERT INTO acemq_idempotency%")

	locker, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Release()
	ltx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ltx.Rollback(context.Background())
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
	c, err := s.TryClaim(ctx, core.ClaimRequest{Key: "a", Owner: "me", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if c.State != core.Claimed {
		t.Fatalf("claiming a after the failed batch: %v, want claimed (the failed batch's claim released)", c.State)
	}
}
