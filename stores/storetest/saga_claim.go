package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// The cases of stores.SagaClaims, which every backend implements: a saga
// delivery's claim and its instance's read in one round trip, the
// instance's advance and the claim's confirm in one commit.

func sagaClaims(t *testing.T, s stores.Set) stores.SagaClaims {
	t.Helper()
	sc, ok := s.(stores.SagaClaims)
	if !ok {
		t.Fatalf("%T does not implement stores.SagaClaims; every backend must", s)
	}
	return sc
}

func claimSaga(t *testing.T, sc stores.SagaClaims, key, instance string) stores.SagaClaim {
	t.Helper()
	out, err := sc.ClaimSagaBatch(t.Context(), []stores.SagaClaimRequest{{ClaimRequest: stores.ClaimRequest{Key: key, Owner: "test"}, Instance: instance}})
	if err != nil {
		t.Fatalf("ClaimSagaBatch(%s, instance %s): %v", key, instance, err)
	}
	if len(out) != 1 {
		t.Fatalf("ClaimSagaBatch of 1 request: %d answers", len(out))
	}
	return out[0]
}

func advanceConfirm(t *testing.T, sc stores.SagaClaims, advs ...stores.SagaAdvance) []stores.SagaAdvanced {
	t.Helper()
	out, err := sc.AdvanceSagaConfirmBatch(t.Context(), advs)
	if err != nil {
		t.Fatalf("AdvanceSagaConfirmBatch of %d: %v", len(advs), err)
	}
	if len(out) != len(advs) {
		t.Fatalf("AdvanceSagaConfirmBatch of %d: %d answers", len(advs), len(out))
	}
	return out
}

// nextStep is inst with its first step completed and the second running.
func nextStep(inst stores.SagaInstance, at time.Time) stores.SagaInstance {
	next := inst
	next.Step = 1
	next.Steps = slices.Clone(inst.Steps)
	next.Steps[0] = stores.SagaStep{Name: "take-payment", State: stores.StepCompleted, Attempts: 1, Output: []byte(`{"payment":"p-1"}`), CompletedAt: at}
	return next
}

func sagaClaimReads(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	sc := sagaClaims(t, b.Set)
	v1 := createSaga(t, b.Set, sagaAt("m-1"))
	c := claimSaga(t, sc, "place-order.take-payment/m-1", "m-1")
	if c.State != stores.Claimed || c.Token == 0 || !c.Found {
		t.Fatalf("ClaimSagaBatch of a new key for instance m-1 = %v token %d found %v; want claimed, a token, the instance", c.State, c.Token, c.Found)
	}
	if err := sameSaga(c.Instance, v1); err != nil {
		t.Fatalf("ClaimSagaBatch read instance m-1: %v", err)
	}
	none := claimSaga(t, sc, "place-order.take-payment/m-2", "nobody")
	if none.State != stores.Claimed || none.Found || none.Instance.ID != "" {
		t.Fatalf("ClaimSagaBatch for an instance never created = %v found %v (%q); want claimed, no instance", none.State, none.Found, none.Instance.ID)
	}
	// The claim is an ordinary claim: the idempotency store sees it held.
	if got, err := b.Set.TryClaim(t.Context(), stores.ClaimRequest{Key: "place-order.take-payment/m-1"}); err != nil || got.State != stores.InProgress {
		t.Fatalf("TryClaim of the key a saga claim holds = %v, %v; want in_progress", got.State, err)
	}
}

func sagaAdvanceConfirms(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	sc := sagaClaims(t, b.Set)
	v1 := createSaga(t, b.Set, sagaAt("m-1"))
	key := "place-order.take-payment/m-1"
	c := claimSaga(t, sc, key, "m-1")
	clock.Advance(time.Second)
	next := nextStep(c.Instance, clock.Now())
	got := advanceConfirm(t, sc, stores.SagaAdvance{Instance: next, Confirm: stores.Held{Key: key, Token: c.Token}})
	if got[0].Refused != nil || got[0].Unconfirmed != nil {
		t.Fatalf("AdvanceSagaConfirmBatch from the version claimed, with the claim's token = refused %v, unconfirmed %v; want written and confirmed", got[0].Refused, got[0].Unconfirmed)
	}
	v2 := getSaga(t, b.Set, "m-1")
	if v2.Version != v1.Version+1 || v2.Step != 1 || v2.Steps[0].State != stores.StepCompleted {
		t.Fatalf("after AdvanceSagaConfirmBatch the instance is version %d step %d, first step %s; want version %d, step 1, completed", v2.Version, v2.Step, v2.Steps[0].State, v1.Version+1)
	}
	// A redelivery of the message finds its claim confirmed, and the
	// instance as the confirm's commit left it: what to send again is read
	// from it.
	again := claimSaga(t, sc, key, "m-1")
	if again.State != stores.AlreadyConfirmed || !again.Found {
		t.Fatalf("ClaimSagaBatch after the advance and confirm = %v found %v; want already_confirmed with the instance", again.State, again.Found)
	}
	if err := sameSaga(again.Instance, v2); err != nil {
		t.Fatalf("the confirmed claim's instance: %v", err)
	}
	if got, err := b.Set.TryClaim(t.Context(), stores.ClaimRequest{Key: key}); err != nil || got.State != stores.AlreadyConfirmed {
		t.Fatalf("TryClaim of the key after AdvanceSagaConfirmBatch = %v, %v; want already_confirmed", got.State, err)
	}
	// Confirming again with the same token is what Confirm allows.
	if err := b.Set.Confirm(t.Context(), key, c.Token); err != nil {
		t.Fatalf("Confirm with the token AdvanceSagaConfirmBatch confirmed: %v; want nil (a repeated confirm succeeds)", err)
	}
}

func sagaAdvanceConfirmStale(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	sc := sagaClaims(t, b.Set)
	createSaga(t, b.Set, sagaAt("m-1"))
	key := "place-order.take-payment/m-1"
	c := claimSaga(t, sc, key, "m-1")
	// Another writer (the saga's timeout) advances the instance first.
	clock.Advance(time.Second)
	moved := c.Instance
	moved.State = stores.SagaCompensating
	v2 := advanceSaga(t, b.Set, moved)
	got := advanceConfirm(t, sc, stores.SagaAdvance{Instance: nextStep(c.Instance, clock.Now()), Confirm: stores.Held{Key: key, Token: c.Token}})
	var se *stores.StaleSagaError
	if !errors.As(got[0].Refused, &se) || se.Version != 1 || se.Current != 2 {
		t.Fatalf("AdvanceSagaConfirmBatch from version 1 after version 2 was written = refused %v; want a *StaleSagaError of version 1, current 2", got[0].Refused)
	}
	if got[0].Unconfirmed != nil {
		t.Fatalf("a refused advance answered unconfirmed %v as well; want only the refusal", got[0].Unconfirmed)
	}
	if err := sameSaga(getSaga(t, b.Set, "m-1"), v2); err != nil {
		t.Fatalf("the refused advance wrote something: %v", err)
	}
	if st, err := b.Set.TryClaim(t.Context(), stores.ClaimRequest{Key: key}); err != nil || st.State != stores.InProgress {
		t.Fatalf("TryClaim after the refused advance = %v, %v; want in_progress (the claim not confirmed, still held)", st.State, err)
	}
	// The refused writer still holds its claim, to release or confirm.
	if err := b.Set.Release(t.Context(), key, c.Token); err != nil {
		t.Fatalf("Release of the claim a refused advance left held: %v", err)
	}
}

func sagaAdvanceConfirmTakenOver(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	sc := sagaClaims(t, b.Set)
	createSaga(t, b.Set, sagaAt("m-1"))
	key := "place-order.take-payment/m-1"
	first := claimSaga(t, sc, key, "m-1")
	clock.Advance(claimTimeout + time.Second)
	second := claimSaga(t, sc, key, "m-1")
	if second.State != stores.Claimed || second.Token <= first.Token || !second.Found {
		t.Fatalf("ClaimSagaBatch after the lease expired = %v token %d (first %d) found %v; want taken over with a larger token and the instance", second.State, second.Token, first.Token, second.Found)
	}
	got := advanceConfirm(t, sc, stores.SagaAdvance{Instance: nextStep(first.Instance, clock.Now()), Confirm: stores.Held{Key: key, Token: first.Token}})
	var ce *stores.StaleClaimError
	if got[0].Refused != nil || !errors.As(got[0].Unconfirmed, &ce) || ce.Token != first.Token || ce.Current != second.Token {
		t.Fatalf("AdvanceSagaConfirmBatch with the token taken over = refused %v, unconfirmed %v; want written, and a *StaleClaimError of token %d, current %d", got[0].Refused, got[0].Unconfirmed, first.Token, second.Token)
	}
	if v := getSaga(t, b.Set, "m-1"); v.Version != 2 || v.Step != 1 {
		t.Fatalf("the instance after an advance whose confirm was refused = version %d step %d, want version 2 step 1 (the write stands)", v.Version, v.Step)
	}
	// The taker's claim is untouched: its own advance is refused as stale
	// (the instance moved on), and its claim can still be released.
	late := advanceConfirm(t, sc, stores.SagaAdvance{Instance: nextStep(second.Instance, clock.Now()), Confirm: stores.Held{Key: key, Token: second.Token}})
	if !errors.Is(late[0].Refused, stores.ErrStaleSaga) {
		t.Fatalf("the taker's advance from version 1 = refused %v; want stale", late[0].Refused)
	}
	if err := b.Set.Release(t.Context(), key, second.Token); err != nil {
		t.Fatalf("Release of the taker's claim: %v; want nil (never confirmed by the other's advance)", err)
	}
}

func sagaClaimBatch(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	sc := sagaClaims(t, b.Set)
	a1 := createSaga(t, b.Set, sagaAt("m-1"))
	a2 := createSaga(t, b.Set, sagaAt("m-2"))
	k1, k2 := "place-order.take-payment/m-1", "place-order.take-payment/m-2"
	req := func(key, inst string) stores.SagaClaimRequest {
		return stores.SagaClaimRequest{ClaimRequest: stores.ClaimRequest{Key: key, Owner: "test"}, Instance: inst}
	}
	out, err := sc.ClaimSagaBatch(t.Context(), []stores.SagaClaimRequest{req(k1, "m-1"), req(k2, "m-2"), req(k1, "m-1")})
	if err != nil {
		t.Fatalf("ClaimSagaBatch of 3: %v", err)
	}
	if out[0].State != stores.Claimed || out[1].State != stores.Claimed || out[2].State == stores.Claimed {
		t.Fatalf("ClaimSagaBatch(k1, k2, k1) = %v, %v, %v; want claimed, claimed, and the second k1 not claimed", out[0].State, out[1].State, out[2].State)
	}
	if err := sameSaga(out[1].Instance, a2); err != nil || !out[0].Found || out[0].Instance.ID != "m-1" {
		t.Fatalf("ClaimSagaBatch read m-2: %v; m-1 found %v (%q)", err, out[0].Found, out[0].Instance.ID)
	}
	clock.Advance(time.Second)
	// Two advances of m-1 from version 1: the first is written, the second
	// sees version 2 and is refused; m-2 advanced with no claim to confirm.
	first := nextStep(a1, clock.Now())
	twice := first
	twice.State = stores.SagaCompensating
	got := advanceConfirm(t, sc,
		stores.SagaAdvance{Instance: first, Confirm: stores.Held{Key: k1, Token: out[0].Token}},
		stores.SagaAdvance{Instance: twice, Confirm: stores.Held{Key: k1, Token: out[0].Token}},
		stores.SagaAdvance{Instance: nextStep(a2, clock.Now())},
		stores.SagaAdvance{Instance: stores.SagaInstance{ID: "m-3"}})
	var se *stores.StaleSagaError
	switch {
	case got[0].Refused != nil || got[0].Unconfirmed != nil:
		t.Fatalf("the first advance of m-1 = refused %v, unconfirmed %v; want written and confirmed", got[0].Refused, got[0].Unconfirmed)
	case !errors.As(got[1].Refused, &se) || se.Version != 1 || se.Current != 2:
		t.Fatalf("the second advance of m-1 from version 1 = refused %v; want stale, current 2", got[1].Refused)
	case got[2].Refused != nil || got[2].Unconfirmed != nil:
		t.Fatalf("the advance of m-2 without a claim = refused %v, unconfirmed %v; want written", got[2].Refused, got[2].Unconfirmed)
	case got[3].Refused == nil || errors.Is(got[3].Refused, stores.ErrStaleSaga):
		t.Fatalf("the advance of an instance without a saga name = refused %v; want refused as invalid", got[3].Refused)
	}
	if v := getSaga(t, b.Set, "m-1"); v.Version != 2 || v.State != stores.SagaRunning {
		t.Fatalf("m-1 after the batch = version %d %s; want version 2 running (the first advance)", v.Version, v.State)
	}
	if v := getSaga(t, b.Set, "m-2"); v.Version != 2 {
		t.Fatalf("m-2 after the batch = version %d; want 2", v.Version)
	}
	if st, err := b.Set.TryClaim(t.Context(), stores.ClaimRequest{Key: k2}); err != nil || st.State != stores.InProgress {
		t.Fatalf("TryClaim of k2, whose advance named no claim = %v, %v; want in_progress (not confirmed)", st.State, err)
	}
	if st, err := b.Set.TryClaim(t.Context(), stores.ClaimRequest{Key: k1}); err != nil || st.State != stores.AlreadyConfirmed {
		t.Fatalf("TryClaim of k1 = %v, %v; want already_confirmed", st.State, err)
	}
}

func sagaClaimRace(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	handles := []stores.SagaClaims{sagaClaims(t, b.Set), sagaClaims(t, b.Peer(t))}
	const goroutines = 16
	for round := range 4 {
		id := fmt.Sprintf("race-%d", round)
		v1 := createSaga(t, b.Set, sagaAt(id))
		key := "place-order.take-payment/" + id
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			claimed = make([]bool, goroutines)
			errs    = make([]error, goroutines)
		)
		for g := range goroutines {
			wg.Go(func() {
				<-start
				sc := handles[g%2]
				// A claim in progress comes round, as the 1s rung would bring
				// it, until the holder's advance and confirm are committed.
				for range 10000 {
					out, err := sc.ClaimSagaBatch(t.Context(), []stores.SagaClaimRequest{{ClaimRequest: stores.ClaimRequest{Key: key, Owner: fmt.Sprint(g)}, Instance: id}})
					if err != nil {
						errs[g] = err
						return
					}
					c := out[0]
					switch c.State {
					case stores.InProgress:
						continue
					case stores.Claimed:
						claimed[g] = true
						if !c.Found || c.Instance.Version != 1 {
							errs[g] = fmt.Errorf("claimed, instance found %v version %d; want version 1", c.Found, c.Instance.Version)
							return
						}
						res, err := sc.AdvanceSagaConfirmBatch(t.Context(), []stores.SagaAdvance{{Instance: nextStep(c.Instance, clock.Now()), Confirm: stores.Held{Key: key, Token: c.Token}}})
						if err == nil && (res[0].Refused != nil || res[0].Unconfirmed != nil) {
							err = fmt.Errorf("advance refused %v, unconfirmed %v", res[0].Refused, res[0].Unconfirmed)
						}
						errs[g] = err
						return
					case stores.AlreadyConfirmed:
						// The confirm was committed with the advance: whoever
						// reads it confirmed reads the instance advanced.
						if !c.Found || c.Instance.Version != 2 {
							errs[g] = fmt.Errorf("already confirmed, instance found %v version %d; want version 2, written with the confirm", c.Found, c.Instance.Version)
						}
						return
					}
					errs[g] = fmt.Errorf("answer %v", c.State)
					return
				}
				errs[g] = errors.New("still in progress after 10000 claims")
			})
		}
		close(start)
		wg.Wait()
		n := 0
		for g := range goroutines {
			if errs[g] != nil {
				t.Fatalf("round %d, goroutine %d: %v", round, g, errs[g])
			}
			if claimed[g] {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("round %d: %d concurrent saga claims of one key: %d claimed, want exactly 1", round, goroutines, n)
		}
		if v := getSaga(t, b.Set, id); v.Version != v1.Version+1 {
			t.Fatalf("round %d: instance at version %d, want %d (one advance)", round, v.Version, v1.Version+1)
		}
	}
}
