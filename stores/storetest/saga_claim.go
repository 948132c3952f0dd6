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
// delivery's claim and its instance's read in one round trip.

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

func sagaClaimAfterConfirm(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	sc := sagaClaims(t, b.Set)
	v1 := createSaga(t, b.Set, sagaAt("m-1"))
	key := "place-order.take-payment/m-1"
	c := claimSaga(t, sc, key, "m-1")
	clock.Advance(time.Second)
	// A saga consumer advances the instance, then confirms the claim.
	v2 := advanceSaga(t, b.Set, nextStep(c.Instance, clock.Now()))
	if v2.Version != v1.Version+1 {
		t.Fatalf("the advance from the version claimed wrote version %d; want %d", v2.Version, v1.Version+1)
	}
	if err := b.Set.Confirm(t.Context(), key, c.Token); err != nil {
		t.Fatalf("Confirm of the saga claim: %v", err)
	}
	// A redelivery of the message finds its claim confirmed, and the
	// instance as the advance before the confirm left it: what to send
	// again is read from it.
	again := claimSaga(t, sc, key, "m-1")
	if again.State != stores.AlreadyConfirmed || !again.Found {
		t.Fatalf("ClaimSagaBatch after the advance and confirm = %v found %v; want already_confirmed with the instance", again.State, again.Found)
	}
	if err := sameSaga(again.Instance, v2); err != nil {
		t.Fatalf("the confirmed claim's instance: %v", err)
	}
}

func sagaClaimTakenOver(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	sc := sagaClaims(t, b.Set)
	createSaga(t, b.Set, sagaAt("m-1"))
	key := "place-order.take-payment/m-1"
	first := claimSaga(t, sc, key, "m-1")
	if again := claimSaga(t, sc, key, "m-1"); again.State != stores.InProgress {
		t.Fatalf("ClaimSagaBatch of a key held within its lease = %v; want in_progress", again.State)
	}
	clock.Advance(claimTimeout + time.Second)
	second := claimSaga(t, sc, key, "m-1")
	if second.State != stores.Claimed || second.Token <= first.Token || !second.Found {
		t.Fatalf("ClaimSagaBatch after the lease expired = %v token %d (first %d) found %v; want taken over with a larger token and the instance", second.State, second.Token, first.Token, second.Found)
	}
	var ce *stores.StaleClaimError
	if err := b.Set.Confirm(t.Context(), key, first.Token); !errors.As(err, &ce) || ce.Token != first.Token || ce.Current != second.Token {
		t.Fatalf("Confirm with the token taken over = %v; want a *StaleClaimError of token %d, current %d", err, first.Token, second.Token)
	}
	if err := b.Set.Release(t.Context(), key, second.Token); err != nil {
		t.Fatalf("Release of the taker's claim: %v", err)
	}
}

func sagaClaimBatch(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
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
	if err := sameSaga(out[1].Instance, a2); err != nil {
		t.Fatalf("ClaimSagaBatch read m-2: %v", err)
	}
	for _, i := range []int{0, 2} {
		if err := sameSaga(out[i].Instance, a1); err != nil || !out[i].Found {
			t.Fatalf("ClaimSagaBatch(k1, k2, k1): answer %d found %v, instance: %v; want m-1 as created (a later request gets the first's instance)", i, out[i].Found, err)
		}
	}
	if got, err := b.Set.TryClaim(t.Context(), stores.ClaimRequest{Key: k1}); err != nil || got.State != stores.InProgress {
		t.Fatalf("TryClaim of k1, claimed in the batch = %v, %v; want in_progress", got.State, err)
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
						// As a saga consumer: the advance, then the confirm.
						if _, err := b.Set.AdvanceSaga(t.Context(), nextStep(c.Instance, clock.Now())); err != nil {
							errs[g] = fmt.Errorf("advance: %w", err)
							return
						}
						errs[g] = b.Set.Confirm(t.Context(), key, c.Token)
						return
					case stores.AlreadyConfirmed:
						// The advance was committed before the confirm: whoever
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
