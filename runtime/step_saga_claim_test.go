package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
)

// claimingBus is the saga bus with each consumer behind its claim gate, on
// the memory store as both the idempotency and the saga store: its
// deliveries claim with the instance and confirm with the write
// (sagaClaimStep). deliver settles each delivery's claim as carryOut
// would once the decision is carried out.
type claimingBus struct {
	*sagaBus
	groups map[string]*group // by queue
}

func newClaimingBus(t *testing.T) *claimingBus {
	t.Helper()
	b := &claimingBus{sagaBus: newSagaBus(t), groups: map[string]*group{}}
	r := &Runtime{opts: Options{Store: b.store, Sagas: b.store}}
	for q, sc := range b.calls {
		g := &group{r: r, c: sc.c, saga: sc, gate: newClaimGate(b.store, sc.c.ID, time.Minute, nil)}
		g.claimWithInstance(sc)
		if sc.claims == nil {
			t.Fatalf("consumer %s on the memory store: the saga call does not claim with the instance", q)
		}
		b.groups[q] = g
	}
	return b
}

// deliver runs m through its consumer's step and returns the decision and
// whether the handling left a claim for carryOut to confirm or release.
func (b *claimingBus) deliver(m decide.Message) (decide.Decision, bool) {
	b.t.Helper()
	g := b.groups[b.queueOf(m)]
	d := &delivery{in: decide.InboundOf(m), received: time.Now()}
	dec := g.step0()(b.t.Context(), d)
	if d.ticket == nil {
		return dec, false
	}
	if succeeded(dec) {
		if err := g.gate.Confirm(b.t.Context(), *d.ticket); err != nil {
			b.t.Fatalf("Confirm after %s: %v", dec.Outcome, err)
		}
	} else if err := g.gate.Release(b.t.Context(), *d.ticket); err != nil {
		b.t.Fatalf("Release after %s: %v", dec.Outcome, err)
	}
	return dec, true
}

// step0 is the group's claim gate around its saga wrapper, as steps()
// chains them.
func (g *group) step0() stepFunc { return g.claimStep(g.sagaStep()) }

func (b *claimingBus) claimState(queue, messageID string) stores.ClaimState {
	b.t.Helper()
	c, err := b.store.TryClaim(b.t.Context(), stores.ClaimRequest{Key: IdempotencyKey(queue, messageID)})
	if err != nil {
		b.t.Fatal(err)
	}
	return c.State
}

// readCountingSagas counts the instance reads the saga wrapper makes apart
// from the claims.
type readCountingSagas struct {
	sagaStore
	gets int
}

func (c *readCountingSagas) GetSaga(ctx context.Context, id string) (stores.SagaInstance, bool, error) {
	c.gets++
	return c.sagaStore.GetSaga(ctx, id)
}

// TestSagaClaimReadsTheInstanceWithTheClaim: a step's delivery reads its
// instance with its claim, not apart; the claim is left for carryOut to
// confirm once what the step sent is published, so a copy delivered after
// that is a duplicate that runs nothing. Every handler runs once and the
// instance completes.
func TestSagaClaimReadsTheInstanceWithTheClaim(t *testing.T) {
	b := newClaimingBus(t)
	reads := &readCountingSagas{sagaStore: b.store}
	for _, sc := range b.calls {
		sc.store = reads
	}
	start := sagaStartMessage("m-1", `{"items":[1]}`)
	first, left := b.deliver(start)
	if first.Outcome != decide.OutcomeAcknowledged || len(first.Publish) != 1 || first.Publish[0].RoutingKey != "reserve-stock" || !left {
		t.Fatalf("the first delivery decided %+v, claim left %v; want acknowledged sending reserve-stock's message, its claim left to confirm after the publish", first, left)
	}
	if st := b.claimState("place-order.take-payment", "m-1"); st != stores.AlreadyConfirmed {
		t.Fatalf("take-payment's claim of m-1 once settled = %v, want already_confirmed", st)
	}
	if again, _ := b.deliver(start); again.Outcome != decide.OutcomeDuplicate || len(again.Publish) != 0 || len(b.handled) != 1 {
		t.Fatalf("a copy of the start after its claim was confirmed decided %+v, handlers %v; want a duplicate that sends and calls nothing", again, b.handled)
	}
	b.carry(first)
	for len(b.pending) > 0 {
		m := b.pending[0]
		b.pending = b.pending[1:]
		dec, _ := b.deliver(m)
		b.carry(dec)
		if dup, _ := b.deliver(m); dup.Outcome != decide.OutcomeDuplicate {
			t.Fatalf("a second delivery of %s decided %s, want duplicate", m.RoutingKey, dup.Outcome)
		}
	}
	b.wantEnd("m-1", "completed", []string{"p.charge", "p.reserve", "p.book"})
	if reads.gets != 0 {
		t.Errorf("the saga wrapper read instances apart %d times, want 0: each delivery's claim reads its instance", reads.gets)
	}
}

// TestSagaClaimStaleWriteKeepsTheClaim: a delivery whose write is refused
// as stale (its instance moved on while the handler ran) confirms nothing
// with it; it reads the instance again, is a duplicate, and releases its
// claim through carryOut as before.
func TestSagaClaimStaleWriteKeepsTheClaim(t *testing.T) {
	b := newClaimingBus(t)
	start := sagaStartMessage("m-1", `{"items":[1]}`)
	first, _ := b.deliver(start)
	b.carry(first)
	m := b.pending[0] // reserve-stock's message
	b.pending = nil
	// While reserve-stock's handler runs, another writer (the saga's
	// timeout) moves the instance on.
	inst := b.instance("m-1")
	sc := b.calls["place-order.reserve-stock"]
	sc.call = func(ctx context.Context, req Request) (decide.Result, error) {
		moved := inst
		moved.State = stores.SagaCompensating
		if _, err := b.store.AdvanceSaga(b.t.Context(), moved); err != nil {
			t.Fatal(err)
		}
		return b.handle(ctx, req)
	}
	dec, left := b.deliver(m)
	if dec.Outcome != decide.OutcomeDuplicate || !left {
		t.Fatalf("a delivery whose write was refused as stale decided %s, claim left to settle %v; want a duplicate whose claim carryOut releases", dec.Outcome, left)
	}
	if st := b.claimState("place-order.reserve-stock", m.MessageID); st != stores.Claimed {
		t.Fatalf("reserve-stock's claim after the stale write = %v, want released (claimed afresh here)", st)
	}
}

// TestSagaClaimNeedsOneStore: the claim reads the instance only when the
// idempotency store is the saga store and can; claims in one database and
// instances in another are claimed and read apart.
func TestSagaClaimNeedsOneStore(t *testing.T) {
	a, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	hidden := struct{ stores.Set }{a} // a store without stores.SagaClaims
	cases := []struct {
		name string
		opts Options
		want bool
	}{
		{"one store that can", Options{Store: a, Sagas: a}, true},
		{"two stores", Options{Store: a, Sagas: b}, false},
		{"a store that cannot", Options{Store: hidden, Sagas: hidden}, false},
		{"no saga store", Options{Store: a}, false},
	}
	for _, tc := range cases {
		if _, got := sagaClaimsOf(tc.opts); got != tc.want {
			t.Errorf("sagaClaimsOf(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
