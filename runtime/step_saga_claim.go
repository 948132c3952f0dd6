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
// the instances too (stores.SagaClaims, one database) waits on the store
// twice per delivery instead of four times: the claim's statement reads the
// instance (ClaimSagaBatch), and the instance's write confirms the claim in
// the same commit (AdvanceSagaConfirmBatch), both coalesced across the
// consumer's concurrent deliveries.
//
// The claim is then confirmed before the decision's messages are
// published, not after (idempotency.go says why a plain idempotent
// consumer must not). A crash between the commit and the publish leaves a
// confirmed message whose next step's message may never have gone out; its
// redelivery is therefore not taken as a plain duplicate: the instance read
// with the claim is asked (decide.SagaAccept) and, when it is where this
// message's handling left it, what that handling sent is sent again, with
// the same ids. The write and the confirm commit together, so a confirmed
// claim always comes with the instance as the handling wrote it.
//
// A write confirms the claim with it only when its decision ends the
// delivery as done (acknowledged, as every transition that writes does
// today); a creation that sends the first step's message confirms after
// the publish, as the gate does, and the timeout's consumer keeps the
// gate's own claim and confirm.

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
	sc.confirms = newCoalescer(gateMaxBatch, sagaMaxInFlight, gateOpTimeout, store.AdvanceSagaConfirmBatch)
}

// sagaClaimStep is the claim gate and the saga wrapper in one, for a saga
// consumer whose saga call claims with the instance: the answer to the claim
// is decided as claimStep decides it, except that a confirmed claim asks the
// instance what to send again (sagaConfirmed).
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
		answer := claimAnswer(c.State)
		if answer == decide.ClaimConfirmed && d.in.Env.MessageID != "" {
			return sc.confirmed(ctx, d.in, c)
		}
		if dec := decide.Claimed(g.c, d.in, answer, time.Now()); dec != nil {
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

// confirmed decides a delivery whose message's claim is confirmed: a
// duplicate, which sends again what its handling sent when the instance is
// still where that handling left it (decide.SagaAccept), since the confirm
// was committed before that was published. Whatever else SagaAccept would
// make of it, a confirmed message is not handled again: it is a duplicate,
// as for any idempotent consumer, and an instance that still waits for it
// is logged.
func (sc *sagaCall) confirmed(ctx context.Context, in decide.Inbound, c stores.SagaClaim) decide.Decision {
	dup := decide.Decision{Outcome: decide.OutcomeDuplicate}
	if !c.Found {
		return dup
	}
	t := decide.SagaAccept(sc.saga, sc.c, sagaOf(c.Instance), in, sc.now())
	switch {
	case t == nil:
		sc.logger().Warn("saga message already handled, yet its instance waits for it; acknowledged as a duplicate, see acemq-flow sagas show",
			"saga", sc.saga.Name, "step", sc.c.Step, "message_id", in.Env.MessageID, "outcome", c.Instance.State)
	case t.Outcome == decide.OutcomeDuplicate:
		return t.Decision()
	}
	return dup
}

// advance writes next, the instance at the version the delivery read. A
// delivery that holds its claim and whose decision ends it as done confirms
// the claim in the same commit, when the saga call can (its ticket is then
// spent: carryOut has nothing left to confirm); any other writes the
// instance alone.
func (sc *sagaCall) advance(ctx context.Context, d *delivery, next stores.SagaInstance, dec decide.Decision) error {
	if sc.confirms == nil || d.ticket == nil || d.ticket.Token == 0 || !succeeded(dec) {
		_, err := sc.store.AdvanceSaga(ctx, next)
		return err
	}
	t := *d.ticket
	res, err := sc.confirms.do(ctx, stores.SagaAdvance{Instance: next, Confirm: stores.Held{Key: t.Key, Token: t.Token}})
	if err != nil {
		return fmt.Errorf("saga %q: advance instance %q from version %d and confirm %q: %w", next.Saga, next.ID, next.Version, t.Key, err)
	}
	if res.Refused != nil {
		return res.Refused
	}
	d.ticket = nil
	if res.Unconfirmed != nil {
		sc.logger().Warn("claim taken over before the handler finished; raise --claim-timeout above the slowest handler",
			"message_id", d.in.Env.MessageID, "error", res.Unconfirmed)
	}
	return nil
}
