package runtime

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/stores"
)

// A saga step's or compensation's consumer whose claim gate's store keeps
// the instances too (stores.SagaClaims, one database) claims a delivery's
// message and reads its instance in one round trip (ClaimSagaBatch,
// coalesced across the consumer's concurrent deliveries), so that the
// handler's path waits on the store twice, the claim with the read and the
// advance, instead of three times; the claim is confirmed as the gate
// confirms it, once the decision's messages are confirmed by the broker
// (idempotency.go says why then), off the handler's path.
//
// Confirming the claim in the advance's commit instead was measured, on
// two cores shared with the broker, and was slower: it moves the confirm's
// write onto the handler's path to save a commit that is not on it
// (README, Speed). The timeout's consumer keeps the gate's own claim and
// the wrapper's own read.

// sagaClaimsOf is the store that claims saga deliveries and writes their
// instances together, when opts's idempotency store is also its saga store
// and can.
func sagaClaimsOf(opts Options) (stores.SagaClaims, bool) {
	sc, ok := opts.Store.(stores.SagaClaims)
	if !ok || !sameStore(opts.Store, opts.Sagas) {
		return nil, false
	}
	return sc, true
}

// sameStore reports whether a and b are the same store value.
func sameStore(a, b any) bool {
	if a == nil || b == nil {
		return false
	}
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// claimWithInstance has saga call sc of group g claim its deliveries and
// read their instances together, and confirm with its writes, when the
// group's gate and its store allow it.
func (g *group) claimWithInstance(sc *sagaCall) {
	store, ok := sagaClaimsOf(g.r.opts)
	if !ok || g.gate == nil || g.c.Kind == plan.KindSagaTimeout {
		return
	}
	sc.claims = newCoalescer(gateMaxBatch, sagaMaxInFlight, gateOpTimeout, store.ClaimSagaBatch)
	gate := g.gate
	sc.claims.abandoned = func(ctx context.Context, reqs []stores.SagaClaimRequest, out []stores.SagaClaim) {
		creqs, cout := make([]stores.ClaimRequest, len(reqs)), make([]stores.Claim, len(out))
		for i := range reqs {
			creqs[i], cout[i] = reqs[i].ClaimRequest, out[i].Claim
		}
		gate.releaseAbandoned(ctx, creqs, cout)
	}
}

// sagaClaimStep is the claim gate and the saga wrapper in one, for a saga
// consumer whose saga call claims with the instance: the answer to the claim
// is decided as claimStep decides it, and a claim taken runs the saga
// wrapper on the instance read with it.
func (g *group) sagaClaimStep() stepFunc {
	sc := g.saga
	return func(ctx context.Context, d *delivery) decide.Decision {
		id, _ := decide.SagaInstanceID(d.in)
		t, c, err := sc.claim(ctx, g.gate, d.in.Env.MessageID, id)
		switch {
		case errors.Is(err, ErrNoMessageID): // decide.Claimed dead-letters it
		case err != nil:
			return g.storeFailed(d.in, decide.StoreIdempotency, err)
		}
		if dec := decide.Claimed(g.c, d.in, claimAnswer(c.State), time.Now()); dec != nil {
			return *dec
		}
		d.ticket = &t
		return sc.run(ctx, d, &c)
	}
}

// claim claims messageID for the gate's consumer and reads instance id, in
// one round trip; its answers are checked as claimGate.Begin checks them.
func (sc *sagaCall) claim(ctx context.Context, gate *claimGate, messageID, id string) (Ticket, stores.SagaClaim, error) {
	if messageID == "" {
		return Ticket{}, stores.SagaClaim{}, ErrNoMessageID
	}
	key := IdempotencyKey(gate.consumer, messageID)
	c, err := sc.claims.do(ctx, stores.SagaClaimRequest{ClaimRequest: stores.ClaimRequest{Key: key, Owner: gate.owner, Lease: gate.lease}, Instance: id})
	if err != nil {
		return Ticket{Key: key}, stores.SagaClaim{}, fmt.Errorf("consumer %q: claim message %q and read saga instance %q: %w", gate.consumer, messageID, id, err)
	}
	switch c.State {
	case stores.Claimed, stores.AlreadyConfirmed, stores.InProgress:
	default:
		return Ticket{Key: key}, stores.SagaClaim{}, fmt.Errorf("consumer %q: claim message %q: the store answered %v, which is not a claim state", gate.consumer, messageID, c.State)
	}
	return Ticket{Key: key, Token: c.Token, Holder: c.Owner, Until: c.ExpiresAt}, c, nil
}
