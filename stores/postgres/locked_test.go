package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// lockedEnv is a migrated store with n records written, and a second store
// on the same tables (another relay's).
func lockedEnv(t *testing.T, opts stores.Options, n int) (s, peer *postgres.Store, ids []int64) {
	t.Helper()
	connURL := testenv.PostgresSchema(t)
	s = storetest.OpenPostgresURL(t, connURL, opts)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	peer = storetest.OpenPostgresURL(t, connURL, opts)
	tx, err := s.Pool().Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id, err := s.Outbox().Add(t.Context(), tx, stores.OutboxRecord{RoutingKey: "q", Body: fmt.Appendf(nil, `{"n":%d}`, i),
			ContentType: "application/json", Properties: stores.Properties{MessageID: fmt.Sprint("m-", i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s, peer, ids
}

func claimLocked(t *testing.T, s *postgres.Store, owner string, n int, lease time.Duration) stores.LockedBatch {
	t.Helper()
	b, err := s.ClaimLocked(t.Context(), owner, n, lease)
	if err != nil {
		t.Fatalf("ClaimLocked(%s, %d): %v", owner, n, err)
	}
	// A test that fails while it holds the batch must not leave the pool
	// waiting for the connection at close.
	t.Cleanup(b.Abort)
	return b
}

func recordIDs(recs []stores.OutboxRecord) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// acquired waits until the store's pool for held batches has n connections
// out.
func acquired(t *testing.T, s *postgres.Store, n int32) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := s.HeldPool().Stat().AcquiredConns(); got != n {
			return fmt.Errorf("%d connections acquired from the pool, want %d", got, n)
		}
		return nil
	})
}

func TestClaimLockedHoldsRowsUntilFinish(t *testing.T) {
	s, peer, ids := lockedEnv(t, stores.Options{OutboxMaxAttempts: 2, OutboxRetryDelay: time.Hour}, 5)
	b := claimLocked(t, s, "a", 3, time.Minute)
	recs := b.Records()
	if got := recordIDs(recs); !slices.Equal(got, ids[:3]) {
		t.Fatalf("ClaimLocked(a, 3) = %v, want the oldest three %v", got, ids[:3])
	}
	if r := recs[0]; string(r.Body) != `{"n":0}` || r.ContentType != "application/json" || r.Properties.MessageID != "m-0" {
		t.Errorf("claimed record = %+v, want its body, content type and message id as written", r)
	}
	acquired(t, s, 1)
	if n := s.Pool().Stat().AcquiredConns(); n != 0 {
		t.Errorf("a held batch took %d connections of the store's main pool, want none", n)
	}
	// Another relay, leasing or locking, gets only the rows not held.
	leased, err := peer.ClaimBatch(t.Context(), "b", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := recordIDs(leased); !slices.Equal(got, ids[3:]) {
		t.Fatalf("ClaimBatch(b) while a holds three rows = %v, want the other two %v", got, ids[3:])
	}
	if c := claimLocked(t, peer, "c", 10, time.Minute); len(c.Records()) != 0 {
		t.Fatalf("ClaimLocked(c) with every row held = %v, want nothing", recordIDs(c.Records()))
	}

	// Published, failed, and left with no verdict.
	stuck, err := b.Finish(t.Context(), []int64{ids[0]}, []stores.FailedRecord{{ID: ids[1], Reason: "reached no queue"}})
	if err != nil || len(stuck) != 0 {
		t.Fatalf("Finish = %v, %v; want no stuck rows and no error", stuck, err)
	}
	acquired(t, s, 0)
	pending, err := s.ListPending(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[int64]stores.OutboxRecord{}
	for _, r := range pending {
		byID[r.ID] = r
	}
	if _, ok := byID[ids[0]]; ok {
		t.Errorf("row %d was marked published but is still pending", ids[0])
	}
	if r := byID[ids[1]]; r.Attempts != 1 || r.LastError != "reached no queue" || r.LeaseOwner != "" || r.LeaseUntil.IsZero() {
		t.Errorf("failed row = %+v, want 1 attempt, its reason, and no owner until the retry delay", r)
	}
	if r := byID[ids[2]]; r.LeaseOwner != "a" || time.Until(r.LeaseUntil) < 30*time.Second {
		t.Errorf("row left without a verdict = %+v, want it leased to a for the claim's lease", r)
	}
	// None of the three is handed out again now: one is published, one waits
	// for its retry, one for its lease.
	if c := claimLocked(t, peer, "c", 10, time.Minute); len(c.Records()) != 0 {
		t.Fatalf("ClaimLocked(c) after the finish = %v, want nothing", recordIDs(c.Records()))
	}
	// Calls after the finish do nothing.
	if stuck, err := b.Finish(t.Context(), []int64{ids[2]}, nil); err != nil || stuck != nil {
		t.Errorf("second Finish = %v, %v; want nothing done", stuck, err)
	}
	b.Abort()
}

func TestClaimLockedAbortAndEmptyClaimsReleaseEverything(t *testing.T) {
	s, peer, ids := lockedEnv(t, stores.Options{}, 3)
	b := claimLocked(t, s, "a", 10, time.Minute)
	if len(b.Records()) != 3 {
		t.Fatalf("ClaimLocked = %d records, want 3", len(b.Records()))
	}
	b.Abort()
	acquired(t, s, 0)
	again := claimLocked(t, peer, "b", 10, time.Minute)
	if got := recordIDs(again.Records()); !slices.Equal(got, ids) {
		t.Fatalf("ClaimLocked after an abort = %v, want every row %v at once", got, ids)
	}
	// Claims that find nothing give their connection back, and it is still
	// usable: no transaction is left open on it.
	for range 20 {
		if c := claimLocked(t, s, "a", 10, time.Minute); len(c.Records()) != 0 {
			t.Fatalf("ClaimLocked while b holds everything = %d records", len(c.Records()))
		}
	}
	acquired(t, s, 0)
	if st := s.HeldPool().Stat(); st.TotalConns() > st.MaxConns() || st.NewConnsCount() > 2 {
		t.Errorf("after 20 empty claims the pool opened %d connections, want them reused", st.NewConnsCount())
	}
	if _, err := again.Finish(t.Context(), ids, nil); err != nil {
		t.Fatal(err)
	}
	if pending, _ := s.ListPending(t.Context(), 0); len(pending) != 0 {
		t.Errorf("%d rows pending after the finish, want 0", len(pending))
	}
}

func TestClaimLockedStuckAtTheAttemptLimit(t *testing.T) {
	s, _, ids := lockedEnv(t, stores.Options{OutboxMaxAttempts: 1}, 2)
	b := claimLocked(t, s, "a", 10, time.Minute)
	stuck, err := b.Finish(t.Context(), nil, []stores.FailedRecord{{ID: ids[0], Reason: "nacked"}, {ID: ids[1], Reason: "nacked"}})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(stuck)
	if !slices.Equal(stuck, ids) {
		t.Fatalf("Finish reported %v stuck, want %v (the limit is one attempt)", stuck, ids)
	}
	list, err := s.ListStuck(t.Context(), 0)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListStuck = %d rows (%v), want 2", len(list), err)
	}
}

// TestClaimLockedIdleTransactionEndsAtTheLease: a relay that holds its
// batch past the lease without a statement (hung) has its transaction ended
// by the database; the rows are handed out again and the late finish is a
// lost lease, not a mark.
func TestClaimLockedIdleTransactionEndsAtTheLease(t *testing.T) {
	s, peer, ids := lockedEnv(t, stores.Options{}, 2)
	b := claimLocked(t, s, "hung", 10, 300*time.Millisecond)
	if len(b.Records()) != 2 {
		t.Fatalf("ClaimLocked = %d records, want 2", len(b.Records()))
	}
	var taken stores.LockedBatch
	testenv.Eventually(t, 30*time.Second, func() error {
		c, err := peer.ClaimLocked(t.Context(), "next", 10, time.Minute)
		if err != nil {
			return err
		}
		t.Cleanup(c.Abort)
		if len(c.Records()) == 0 {
			return errors.New("the hung relay's rows are still held")
		}
		taken = c
		return nil
	})
	if got := recordIDs(taken.Records()); !slices.Equal(got, ids) {
		t.Fatalf("after the lease the next relay got %v, want %v", got, ids)
	}
	_, err := b.Finish(context.Background(), ids, nil)
	var lost *stores.LeaseLostError
	if !errors.As(err, &lost) || !slices.Equal(lost.IDs, ids) {
		t.Fatalf("Finish after the lease = %v, want a *LeaseLostError for %v", err, ids)
	}
	if _, err := taken.Finish(t.Context(), ids, nil); err != nil {
		t.Fatal(err)
	}
	acquired(t, s, 0)
	acquired(t, peer, 0)
}

// A claim made while the store holds batches starts after them, instead of
// stepping through the rows they lock; rows behind them that became
// claimable meanwhile are taken by the next claim that reads from the head.
func TestClaimLockedStartsAfterHeldBatchesAndComesBackForRowsBehind(t *testing.T) {
	s, _, ids := lockedEnv(t, stores.Options{}, 4)
	postgres.SetHeadScanEvery(t, time.Hour)
	first := claimLocked(t, s, "a", 1, time.Minute)
	second := claimLocked(t, s, "a", 1, time.Minute)
	if got := recordIDs(second.Records()); !slices.Equal(got, ids[1:2]) {
		t.Fatalf("second claim took %v, want %v", got, ids[1:2])
	}
	first.Abort() // ids[0] is claimable again, behind the held batch

	ahead := claimLocked(t, s, "a", 1, time.Minute)
	if got := recordIDs(ahead.Records()); !slices.Equal(got, ids[2:3]) {
		t.Fatalf("a claim while a batch is held took %v, want %v (the row after the held batch)", got, ids[2:3])
	}
	postgres.SetHeadScanEvery(t, 0)
	behind := claimLocked(t, s, "a", 1, time.Minute)
	if got := recordIDs(behind.Records()); !slices.Equal(got, ids[0:1]) {
		t.Fatalf("a claim reading from the head took %v, want %v (the row behind the held batches)", got, ids[0:1])
	}

	// With no batch held, a claim reads from the head whenever it last did.
	postgres.SetHeadScanEvery(t, time.Hour)
	for _, b := range []stores.LockedBatch{second, ahead, behind} {
		b.Abort()
	}
	again := claimLocked(t, s, "a", 1, time.Minute)
	if got := recordIDs(again.Records()); !slices.Equal(got, ids[0:1]) {
		t.Fatalf("a claim with no batch held took %v, want %v", got, ids[0:1])
	}
}

// A claim from the head that fills its batch with rows behind the held
// batches leaves the next claim reading from the head too, until one
// reaches past them: a backlog behind them (records whose retry delay
// ended together) is taken at claim speed, not a batch per interval.
func TestClaimLockedKeepsReadingFromTheHeadWhileRowsWaitBehind(t *testing.T) {
	s, _, ids := lockedEnv(t, stores.Options{}, 6)
	postgres.SetHeadScanEvery(t, time.Hour)
	claim := func(want int64, why string) stores.LockedBatch {
		t.Helper()
		b := claimLocked(t, s, "a", 1, time.Minute)
		if got := recordIDs(b.Records()); !slices.Equal(got, []int64{want}) {
			t.Fatalf("%s: took %v, want [%d]", why, got, want)
		}
		return b
	}
	a := claim(ids[0], "the first claim")
	b := claim(ids[1], "a claim after it")
	claim(ids[2], "a claim after both")
	a.Abort()
	b.Abort() // ids[0] and ids[1] are behind the held batch of ids[2]

	postgres.SetHeadScanEvery(t, 0)
	claim(ids[0], "a claim from the head")
	postgres.SetHeadScanEvery(t, time.Hour)
	claim(ids[1], "the claim after a full batch from behind the held ones")
	claim(ids[3], "the claim after that, which finds nothing more behind")
	claim(ids[4], "a claim once nothing is left behind")
}

// PostgreSQL's idle-in-transaction timeout is a 32-bit count of
// milliseconds: a lease past 24.8 days is bounded there instead of failing
// every claim.
func TestClaimLockedTakesALeaseOfMonths(t *testing.T) {
	s, _, ids := lockedEnv(t, stores.Options{}, 1)
	b := claimLocked(t, s, "a", 10, 90*24*time.Hour)
	if got := recordIDs(b.Records()); !slices.Equal(got, ids) {
		t.Fatalf("claim with a 90-day lease took %v, want %v", got, ids)
	}
	if _, err := b.Finish(t.Context(), ids, nil); err != nil {
		t.Fatal(err)
	}
}

// A locked batch commits asynchronously (claimSettings says why) and walks
// the pending index in id order.
func TestClaimLockedTransactionSettings(t *testing.T) {
	s, _, _ := lockedEnv(t, stores.Options{}, 1)
	b := claimLocked(t, s, "a", 10, time.Minute)
	for name, want := range map[string]string{"synchronous_commit": "off", "enable_seqscan": "off", "idle_in_transaction_session_timeout": "1min"} {
		got, err := postgres.BatchSetting(b, name)
		if err != nil || got != want {
			t.Errorf("%s in the batch's transaction = %q, %v; want %q", name, got, err, want)
		}
	}
	b.Abort()
}
