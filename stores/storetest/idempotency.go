package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func asSchema(err error, target **stores.SchemaError) bool { return errors.As(err, target) }

// RunIdempotency runs the idempotency store's cases.
func RunIdempotency(t *testing.T, open Opener, f Features) {
	cases := []struct {
		name string
		run  func(t *testing.T, open Opener, f Features)
	}{
		{"claim then confirm then a duplicate is already confirmed", claimConfirmDuplicate},
		{"an in-progress claim is not treated as confirmed", inProgressIsNotConfirmed},
		{"a duplicate claim is an answer, not an error (the SQLite duplicate that threw)", duplicateIsAnAnswer},
		{"release lets the next claim win at once", releaseLetsNextClaim},
		{"concurrent duplicate claims from two pools have exactly one winner", concurrentClaims},
		{"lease expiry lets another claimant take over", leaseExpiryTakeover},
		{"a confirm or release with a stale token is refused", staleTokenRefused},
		{"a confirm after the lease expired succeeds when nobody took over", lateConfirmWithoutTakeover},
		{"confirming twice with the same token succeeds", confirmIsRepeatable},
		{"release after confirm is refused and the key stays confirmed", releaseAfterConfirm},
		{"tokens increase with every claim", tokensIncrease},
		{"purge removes expired leases and old confirmations only", purgeExpired},
		{"a lease longer than retention is refused", leaseLongerThanRetention},
		{"a cancelled context is an error, not in progress", cancelledContext},
		{"a lock timeout is an error, not in progress", lockTimeout},
		{"a batch claim gives each message its own answer", batchClaim},
		{"concurrent overlapping batch claims have exactly one winner per key", concurrentBatchClaims},
		{"a batch confirm refuses only the stale claims", batchConfirm},
		{"a confirmation survives closing the store", durableConfirmation},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open, f) })
	}
}

func claim(t *testing.T, s stores.Idempotency, key string) stores.Claim {
	t.Helper()
	c, err := s.TryClaim(t.Context(), stores.ClaimRequest{Key: key, Owner: "test"})
	if err != nil {
		t.Fatalf("TryClaim(%q): %v", key, err)
	}
	return c
}

func wantState(t *testing.T, s stores.Idempotency, key string, want stores.ClaimState) stores.Claim {
	t.Helper()
	c := claim(t, s, key)
	if c.State != want {
		t.Fatalf("TryClaim(%q) = %v, want %v", key, c.State, want)
	}
	if (c.State == stores.Claimed) != (c.Token != 0) {
		t.Fatalf("TryClaim(%q) = %v with token %d; a token comes with claimed and only with claimed", key, c.State, c.Token)
	}
	return c
}

func wantStale(t *testing.T, what string, err error) *stores.StaleClaimError {
	t.Helper()
	var se *stores.StaleClaimError
	if !errors.Is(err, stores.ErrStaleClaim) || !errors.As(err, &se) {
		t.Fatalf("%s = %v, want a *StaleClaimError", what, err)
	}
	return se
}

func claimConfirmDuplicate(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	ctx := t.Context()
	c := wantState(t, b.Set, "m-1", stores.Claimed)
	if c.Owner != "test" || c.ExpiresAt.IsZero() {
		t.Errorf("TryClaim(m-1) = owner %q expires %v, want owner test and a lease end", c.Owner, c.ExpiresAt)
	}
	if err := b.Set.Confirm(ctx, "m-1", c.Token); err != nil {
		t.Fatalf("Confirm(m-1, %d): %v", c.Token, err)
	}
	wantState(t, b.Set, "m-1", stores.AlreadyConfirmed)
	wantState(t, b.Peer(t), "m-1", stores.AlreadyConfirmed)
	wantState(t, b.Set, "m-2", stores.Claimed)
}

// Until the 0.7 line an in-progress claim was treated as a duplicate and
// acknowledged, which lost the message whenever its holder died.
func inProgressIsNotConfirmed(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	first := wantState(t, b.Set, "m-1", stores.Claimed)
	second := wantState(t, b.Peer(t), "m-1", stores.InProgress)
	if second.Owner != "test" || !second.ExpiresAt.Equal(first.ExpiresAt) {
		t.Errorf("in-progress answer names holder %q until %v, want %q until %v", second.Owner, second.ExpiresAt, "test", first.ExpiresAt)
	}
	// The holder dies without confirming or releasing: the message must come
	// round and be handled, never counted as done.
	clock.Advance(claimTimeout + time.Second)
	wantState(t, b.Set, "m-1", stores.Claimed)
}

// Through the 0.7 line the JDBC store read SQLState to spot a duplicate;
// sqlite-jdbc sets none, so a duplicate threw and was dead-lettered.
func duplicateIsAnAnswer(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	ctx := t.Context()
	c := wantState(t, b.Set, "m-1", stores.Claimed)
	for i := range 3 {
		got, err := b.Set.TryClaim(ctx, stores.ClaimRequest{Key: "m-1"})
		if err != nil || got.State != stores.InProgress {
			t.Fatalf("duplicate TryClaim #%d = %v, %v; want in_progress and no error", i+1, got.State, err)
		}
	}
	if err := b.Set.Confirm(ctx, "m-1", c.Token); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		got, err := b.Set.TryClaim(ctx, stores.ClaimRequest{Key: "m-1"})
		if err != nil || got.State != stores.AlreadyConfirmed {
			t.Fatalf("duplicate TryClaim #%d after confirm = %v, %v; want already_confirmed and no error", i+1, got.State, err)
		}
	}
}

func releaseLetsNextClaim(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	c := wantState(t, b.Set, "m-1", stores.Claimed)
	if err := b.Set.Release(t.Context(), "m-1", c.Token); err != nil {
		t.Fatalf("Release(m-1, %d): %v", c.Token, err)
	}
	next := wantState(t, b.Peer(t), "m-1", stores.Claimed)
	if next.Token <= c.Token {
		t.Errorf("token after release = %d, want more than %d", next.Token, c.Token)
	}
}

// Two replicas racing on one id: one insert wins. The guarantee must come
// from the database, so the race runs through two pools.
func concurrentClaims(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	handles := []stores.Set{b.Set, b.Peer(t)}
	const goroutines = 24
	for round := range 5 {
		key := fmt.Sprintf("race-%d", round)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			answers = make([]stores.Claim, goroutines)
			errs    = make([]error, goroutines)
		)
		for g := range goroutines {
			wg.Go(func() {
				<-start
				answers[g], errs[g] = handles[g%2].TryClaim(t.Context(), stores.ClaimRequest{Key: key, Owner: fmt.Sprint("g", g)})
			})
		}
		close(start)
		wg.Wait()
		counts := map[stores.ClaimState]int{}
		for g := range goroutines {
			if errs[g] != nil {
				t.Fatalf("round %d: TryClaim(%s) in goroutine %d: %v", round, key, g, errs[g])
			}
			counts[answers[g].State]++
		}
		if counts[stores.Claimed] != 1 || counts[stores.InProgress] != goroutines-1 {
			t.Fatalf("round %d: %d concurrent TryClaim(%s) = %v, want exactly one claimed and the rest in_progress", round, goroutines, key, counts)
		}
	}
}

func leaseExpiryTakeover(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	first := wantState(t, b.Set, "m-1", stores.Claimed)
	clock.Advance(claimTimeout - time.Second)
	wantState(t, b.Peer(t), "m-1", stores.InProgress)
	clock.Advance(time.Second)
	second := wantState(t, b.Peer(t), "m-1", stores.Claimed)
	if second.Token <= first.Token {
		t.Errorf("takeover token %d, want more than the first claim's %d", second.Token, first.Token)
	}
	wantState(t, b.Set, "m-1", stores.InProgress)
}

// A slow first handler must not confirm (or release) work the second
// claimant now owns.
func staleTokenRefused(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	ctx := t.Context()
	first := wantState(t, b.Set, "m-1", stores.Claimed)
	clock.Advance(claimTimeout + time.Second)
	second := wantState(t, b.Set, "m-1", stores.Claimed)

	se := wantStale(t, "Confirm with the taken-over token", b.Set.Confirm(ctx, "m-1", first.Token))
	if se.Key != "m-1" || se.Token != first.Token || se.Current != second.Token || se.Confirmed {
		t.Errorf("StaleClaimError = %+v, want key m-1, token %d, current %d, not confirmed", *se, first.Token, second.Token)
	}
	wantStale(t, "Release with the taken-over token", b.Set.Release(ctx, "m-1", first.Token))
	wantState(t, b.Set, "m-1", stores.InProgress) // the refused release freed nothing

	if err := b.Set.Confirm(ctx, "m-1", second.Token); err != nil {
		t.Fatalf("Confirm by the current holder: %v", err)
	}
	se = wantStale(t, "Confirm with the stale token after the holder confirmed", b.Set.Confirm(ctx, "m-1", first.Token))
	if !se.Confirmed || se.Current != second.Token {
		t.Errorf("StaleClaimError = %+v, want confirmed by token %d", *se, second.Token)
	}
	wantStale(t, "Confirm of a key never claimed", b.Set.Confirm(ctx, "never", 12345))
}

func lateConfirmWithoutTakeover(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	c := wantState(t, b.Set, "m-1", stores.Claimed)
	clock.Advance(claimTimeout + time.Second)
	if err := b.Set.Confirm(t.Context(), "m-1", c.Token); err != nil {
		t.Fatalf("Confirm after the lease expired, nobody took over: %v", err)
	}
	wantState(t, b.Set, "m-1", stores.AlreadyConfirmed)
}

// A confirm whose commit was ambiguous is retried; the retry must succeed.
func confirmIsRepeatable(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	c := wantState(t, b.Set, "m-1", stores.Claimed)
	for i := range 2 {
		if err := b.Set.Confirm(t.Context(), "m-1", c.Token); err != nil {
			t.Fatalf("Confirm #%d: %v", i+1, err)
		}
	}
	wantState(t, b.Set, "m-1", stores.AlreadyConfirmed)
}

func releaseAfterConfirm(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	c := wantState(t, b.Set, "m-1", stores.Claimed)
	if err := b.Set.Confirm(t.Context(), "m-1", c.Token); err != nil {
		t.Fatal(err)
	}
	se := wantStale(t, "Release after Confirm", b.Set.Release(t.Context(), "m-1", c.Token))
	if !se.Confirmed || se.Current != c.Token {
		t.Errorf("StaleClaimError = %+v, want already confirmed by the same token", *se)
	}
	wantState(t, b.Set, "m-1", stores.AlreadyConfirmed)
}

func tokensIncrease(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	peer := b.Peer(t)
	var last stores.Token
	for i := range 10 {
		s := stores.Idempotency(b.Set)
		if i%2 == 1 {
			s = peer
		}
		c := wantState(t, s, fmt.Sprint("k-", i), stores.Claimed)
		if c.Token <= last {
			t.Fatalf("claim #%d token %d, want more than %d", i+1, c.Token, last)
		}
		last = c.Token
	}
}

func purgeExpired(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	ctx := t.Context()
	wantState(t, b.Set, "held", stores.Claimed)
	c := wantState(t, b.Set, "done", stores.Claimed)
	if err := b.Set.Confirm(ctx, "done", c.Token); err != nil {
		t.Fatal(err)
	}
	purge := func(want int64) {
		t.Helper()
		n, err := b.Set.PurgeExpired(ctx)
		if err != nil || n != want {
			t.Fatalf("PurgeExpired = %d, %v; want %d", n, err, want)
		}
	}
	purge(0)
	clock.Advance(claimTimeout)
	purge(1) // the expired lease
	wantState(t, b.Set, "done", stores.AlreadyConfirmed)
	clock.Advance(retention)
	purge(1) // the old confirmation
	wantState(t, b.Set, "done", stores.Claimed)
	wantState(t, b.Set, "held", stores.Claimed)
}

func leaseLongerThanRetention(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	ctx := t.Context()
	if _, err := b.Set.TryClaim(ctx, stores.ClaimRequest{Key: "m-1", Lease: retention + time.Second}); err == nil {
		t.Fatal("TryClaim with a lease longer than retention: nil error, want a refusal")
	}
	if _, err := b.Set.TryClaim(ctx, stores.ClaimRequest{Key: ""}); err == nil {
		t.Fatal("TryClaim with an empty key: nil error, want a refusal")
	}
	c, err := b.Set.TryClaim(ctx, stores.ClaimRequest{Key: "m-1", Lease: 10 * time.Second})
	if err != nil || c.State != stores.Claimed {
		t.Fatalf("TryClaim with a 10s lease = %v, %v; want claimed", c.State, err)
	}
	if _, err := storeurl.Open(ctx, "memory:", stores.Options{ClaimTimeout: 2 * time.Hour, Retention: time.Hour}); err == nil {
		t.Fatal("Open with claim timeout longer than retention: nil error, want a refusal")
	}
}

func cancelledContext(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	c := wantState(t, b.Set, "m-1", stores.Claimed)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	got, err := b.Set.TryClaim(ctx, stores.ClaimRequest{Key: "m-1"})
	if err == nil {
		t.Fatalf("TryClaim with a cancelled context = %v, nil error; want an error", got.State)
	}
	if _, err := b.Set.TryClaimBatch(ctx, []stores.ClaimRequest{{Key: "m-2"}}); err == nil {
		t.Fatal("TryClaimBatch with a cancelled context: nil error, want an error")
	}
	if err := b.Set.Confirm(ctx, "m-1", c.Token); err == nil || errors.Is(err, stores.ErrStaleClaim) {
		t.Fatalf("Confirm with a cancelled context = %v, want a store error", err)
	}
	wantState(t, b.Set, "m-1", stores.InProgress)
}

// A lock timeout must not be mistaken for "somebody already has this", or
// the caller acknowledges a message nothing handled.
func lockTimeout(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	if b.LockHeld == nil {
		t.Skip("this backend has no lock for a claim to wait on; the cancelled-context case covers its failures")
	}
	ctx := t.Context()
	c := wantState(t, b.Set, "m-1", stores.Claimed)
	impatient, release := b.LockHeld(t)
	defer release()

	got, err := impatient.TryClaim(ctx, stores.ClaimRequest{Key: "m-2"})
	if err == nil {
		t.Fatalf("TryClaim(m-2) while the table is locked = %v, nil error; want a lock timeout error", got.State)
	}
	got, err = impatient.TryClaim(ctx, stores.ClaimRequest{Key: "m-1"})
	if err == nil {
		t.Fatalf("duplicate TryClaim(m-1) while the table is locked = %v, nil error; want a lock timeout error", got.State)
	}
	if _, err := impatient.TryClaimBatch(ctx, []stores.ClaimRequest{{Key: "m-1"}, {Key: "m-3"}}); err == nil {
		t.Fatal("TryClaimBatch while the table is locked: nil error, want a lock timeout error")
	}
	if err := impatient.Confirm(ctx, "m-1", c.Token); err == nil || errors.Is(err, stores.ErrStaleClaim) {
		t.Fatalf("Confirm while the table is locked = %v, want a lock timeout error", err)
	}
	release()
	wantState(t, impatient, "m-2", stores.Claimed)
	if err := impatient.Confirm(ctx, "m-1", c.Token); err != nil {
		t.Fatalf("Confirm after the lock was released: %v", err)
	}
}

func batchClaim(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	ctx := t.Context()
	done := wantState(t, b.Set, "done", stores.Claimed)
	if err := b.Set.Confirm(ctx, "done", done.Token); err != nil {
		t.Fatal(err)
	}
	wantState(t, b.Set, "held", stores.Claimed)

	reqs := []stores.ClaimRequest{{Key: "new-1"}, {Key: "done"}, {Key: "held"}, {Key: "new-1"}, {Key: "new-2"}, {Key: "done"}}
	out, err := b.Peer(t).TryClaimBatch(ctx, reqs)
	if err != nil {
		t.Fatalf("TryClaimBatch: %v", err)
	}
	want := []stores.ClaimState{stores.Claimed, stores.AlreadyConfirmed, stores.InProgress, stores.InProgress, stores.Claimed, stores.AlreadyConfirmed}
	if len(out) != len(want) {
		t.Fatalf("TryClaimBatch of %d = %d answers", len(reqs), len(out))
	}
	for i := range want {
		if out[i].State != want[i] || (out[i].State == stores.Claimed) != (out[i].Token != 0) {
			t.Errorf("TryClaimBatch answer %d (%s) = %v token %d, want %v", i, reqs[i].Key, out[i].State, out[i].Token, want[i])
		}
	}
	if out[0].Token == out[4].Token {
		t.Errorf("two claims in one batch share token %d", out[0].Token)
	}
	if err := b.Set.Confirm(ctx, "new-1", out[0].Token); err != nil {
		t.Errorf("Confirm of a batch claim: %v", err)
	}
	if out, err := b.Set.TryClaimBatch(ctx, nil); err != nil || len(out) != 0 {
		t.Errorf("TryClaimBatch(nil) = %v, %v; want nothing", out, err)
	}
}

func concurrentBatchClaims(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	handles := []stores.Set{b.Set, b.Peer(t)}
	const goroutines, keys = 8, 40
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		winners = map[string]int{}
		errs    []error
	)
	for g := range goroutines {
		reqs := make([]stores.ClaimRequest, keys)
		for i, k := range rand.Perm(keys) {
			reqs[i] = stores.ClaimRequest{Key: fmt.Sprint("k-", k), Owner: fmt.Sprint("g", g)}
		}
		wg.Go(func() {
			<-start
			out, err := handles[g%2].TryClaimBatch(t.Context(), reqs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			for i, c := range out {
				if c.State == stores.Claimed {
					winners[reqs[i].Key]++
				} else if c.State != stores.InProgress {
					errs = append(errs, fmt.Errorf("%s: %v", reqs[i].Key, c.State))
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent TryClaimBatch: %v", errors.Join(errs...))
	}
	for k := range keys {
		if n := winners[fmt.Sprint("k-", k)]; n != 1 {
			t.Errorf("key k-%d claimed %d times by %d concurrent batches, want exactly once", k, n, goroutines)
		}
	}
}

func batchConfirm(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	ctx := t.Context()
	stale := wantState(t, b.Set, "taken", stores.Claimed)
	clock.Advance(claimTimeout)
	taker := wantState(t, b.Set, "taken", stores.Claimed)
	c1 := wantState(t, b.Set, "a", stores.Claimed)
	c2 := wantState(t, b.Set, "b", stores.Claimed)
	held := []stores.Held{{Key: "a", Token: c1.Token}, {Key: "taken", Token: stale.Token}, {Key: "b", Token: c2.Token}, {Key: "gone", Token: 99999}}
	refused, err := b.Peer(t).ConfirmBatch(ctx, held)
	if err != nil {
		t.Fatalf("ConfirmBatch: %v", err)
	}
	if len(refused) != len(held) || refused[0] != nil || refused[2] != nil {
		t.Fatalf("ConfirmBatch = %v, want a and b confirmed", refused)
	}
	se := wantStale(t, "ConfirmBatch of the taken-over claim", refused[1])
	if se.Current != taker.Token {
		t.Errorf("StaleClaimError current = %d, want %d", se.Current, taker.Token)
	}
	wantStale(t, "ConfirmBatch of an unknown claim", refused[3])
	wantState(t, b.Set, "a", stores.AlreadyConfirmed)
	wantState(t, b.Set, "b", stores.AlreadyConfirmed)
	wantState(t, b.Set, "taken", stores.InProgress)
}

func durableConfirmation(t *testing.T, open Opener, f Features) {
	if !f.Durable {
		t.Skip("this backend keeps nothing after Close")
	}
	b, _ := fixture(t, open)
	c := wantState(t, b.Set, "m-1", stores.Claimed)
	if err := b.Set.Confirm(t.Context(), "m-1", c.Token); err != nil {
		t.Fatal(err)
	}
	wantState(t, b.Set, "m-2", stores.Claimed)
	if err := b.Set.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	again := b.Peer(t)
	wantState(t, again, "m-1", stores.AlreadyConfirmed)
	wantState(t, again, "m-2", stores.InProgress)
}
