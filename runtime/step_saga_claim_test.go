package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/stores"
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
		if sc.claims == nil || sc.confirms == nil {
			t.Fatalf("consumer %s on the memory store: the saga call does not claim with the instance", q)
		}
		b.groups[q] = g
	}
	return b
}

// deliver runs m through its consumer's step and returns the decision and
// whether the handling left its claim for carryOut to confirm or release
// (confirmed with the write: false).
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

// TestSagaClaimConfirmsWithTheWriteAndResendsWhatACrashLost: a step's
// delivery claims and reads its instance together and confirms its claim
// in the instance's write, leaving nothing to confirm after the publish;
// when that publish is lost (a crash after the commit) the redelivery finds
// its claim confirmed and, rather than being dropped as a plain duplicate,
// sends the next step's message again with the same id. Every handler runs
// once and the instance completes.
func TestSagaClaimConfirmsWithTheWriteAndResendsWhatACrashLost(t *testing.T) {
	b := newClaimingBus(t)
	start := sagaStartMessage("m-1", `{"items":[1]}`)
	lost, left := b.deliver(start)
	if lost.Outcome != decide.OutcomeAcknowledged || len(lost.Publish) != 1 || lost.Publish[0].RoutingKey != "reserve-stock" {
		t.Fatalf("the first delivery decided %+v, want acknowledged sending reserve-stock's message", lost)
	}
	if left {
		t.Fatal("the first delivery left its claim to be confirmed after the publish; want it confirmed with the instance's write")
	}
	if st := b.claimState("place-order.take-payment", "m-1"); st != stores.AlreadyConfirmed {
		t.Fatalf("take-payment's claim of m-1 after the write = %v, want already_confirmed", st)
	}
	// The publish was lost: the redelivery is a duplicate that sends it
	// again, and calls nothing.
	again, _ := b.deliver(start)
	if again.Outcome != decide.OutcomeDuplicate || len(again.Publish) != 1 || again.Publish[0].MessageID != lost.Publish[0].MessageID {
		t.Fatalf("the redelivery of a confirmed message whose publish was lost decided %+v, want a duplicate sending reserve-stock's message again, same id", again)
	}
	if len(b.handled) != 1 {
		t.Fatalf("handlers called %v after the redelivery, want p.charge once", b.handled)
	}
	b.carry(again)
	for len(b.pending) > 0 {
		m := b.pending[0]
		b.pending = b.pending[1:]
		dec, _ := b.deliver(m)
		b.carry(dec)
		// Each step's message delivered twice: the copy is a duplicate.
		if dup, _ := b.deliver(m); dup.Outcome != decide.OutcomeDuplicate {
			t.Fatalf("a second delivery of %s decided %s, want duplicate", m.RoutingKey, dup.Outcome)
		}
	}
	b.wantEnd("m-1", "completed", []string{"p.charge", "p.reserve", "p.book"})
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
