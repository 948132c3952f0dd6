package runtime

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/stores"
)

var errDown = &stores.UnavailableError{Backend: "postgres", Err: errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")}

// testOutages is an outages whose probe of every store answers with what
// probe holds.
func testOutages(t *testing.T) (*outages, *atomic.Pointer[error]) {
	t.Helper()
	var probe atomic.Pointer[error]
	down := error(errDown)
	probe.Store(&down)
	stop := make(chan struct{})
	wg := &sync.WaitGroup{}
	t.Cleanup(func() { close(stop); wg.Wait() })
	o := &outages{log: slog.New(slog.DiscardHandler), wg: wg, stop: stop, down: map[string]*outage{},
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "acemq_store_unavailable_total"}, []string{"store"}),
		probes:   map[string]func(context.Context) error{}}
	for _, s := range []string{decide.StoreIdempotency, decide.StoreSaga, decide.StoreBlobs} {
		o.probes[s] = func(context.Context) error { return *probe.Load() }
	}
	return o, &probe
}

func TestAnOutagePausesItsConsumersUntilTheProbeAnswers(t *testing.T) {
	o, probe := testOutages(t)
	if o.failed(decide.StoreIdempotency, errors.New("lock timeout")) {
		t.Fatal("failed(lock timeout) = true: a refusal is no outage")
	}
	if !o.wait(t.Context(), []string{decide.StoreIdempotency}) || len(o.list()) != 0 {
		t.Fatal("a refusal of the store paused its consumers")
	}
	if !o.failed(decide.StoreIdempotency, errDown) || !o.failed(decide.StoreIdempotency, errDown) {
		t.Fatal("failed(the store's outage) = false")
	}
	var m dto.Metric
	if err := o.failures.WithLabelValues(decide.StoreIdempotency).Write(&m); err != nil || m.GetCounter().GetValue() != 2 {
		t.Errorf("acemq_store_unavailable_total{store=idempotency} = %v (%v), want 2", m.GetCounter().GetValue(), err)
	}
	l := o.list()
	if len(l) != 1 || l[0].Store != decide.StoreIdempotency || !strings.Contains(l[0].Why(), "idempotency store unavailable since ") || !strings.Contains(l[0].Why(), "57P01") {
		t.Fatalf("list() = %+v, want the idempotency store, once, with the failure", l)
	}
	// A group that does not use the store goes on.
	if !o.wait(t.Context(), []string{decide.StoreBlobs}) {
		t.Error("a group without the idempotency store paused")
	}
	// One that does waits: here until its context ends.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if o.wait(ctx, []string{decide.StoreSaga, decide.StoreIdempotency}) {
		t.Fatal("wait returned true while the idempotency store is down")
	}
	// The probe answers: the waiter resumes and the outage is over.
	resumed := make(chan bool, 1)
	go func() { resumed <- o.wait(t.Context(), []string{decide.StoreIdempotency}) }()
	var up error = &stores.StaleClaimError{Key: "acemq-probe/store"}
	probe.Store(&up)
	select {
	case ok := <-resumed:
		if !ok {
			t.Fatal("wait returned false, want true once the store answers")
		}
	case <-time.After(time.Minute):
		t.Fatal("the consumers did not resume within a minute of the store answering")
	}
	if l := o.list(); len(l) != 0 {
		t.Errorf("list() after the probe answered = %+v, want none", l)
	}
}

func TestClaimStepHoldsADeliveryWhenTheStoreIsDown(t *testing.T) {
	o, _ := testOutages(t)
	c := &plan.Consumer{ID: "shop.charge", Kind: plan.KindStep, Queue: "shop.charge", Idempotent: true,
		Retry: plan.Retry{MaxAttempts: 2, Rungs: []plan.Rung{{Attempt: 2, Delay: plan.Duration(time.Second), Queue: plan.RetryQueue("shop.charge", time.Second)}}}}
	g := &group{r: &Runtime{outages: o}, c: c, gate: newClaimGate(brokenStore{err: errDown}, c.ID, time.Minute, nil)}
	called := false
	step := g.claimStep(func(context.Context, *delivery) decide.Decision { called = true; return decide.Decision{} })
	in := decide.InboundOf(decide.Message{MessageID: "m1", Headers: decide.Table{plan.HeaderAttempt: int64(2)}})
	dec := step(t.Context(), &delivery{in: in})
	if called {
		t.Error("the handler ran although the claim could not be taken")
	}
	if dec.Outcome != decide.OutcomeHeld || len(dec.Publish) != 1 || dec.Publish[0].Headers[plan.HeaderAttempt] != int64(2) {
		t.Fatalf("claim step with the store down = %s %+v, want held, round the 1s rung, attempt still 2", dec.Outcome, dec.Publish)
	}
	if l := o.list(); len(l) != 1 || l[0].Store != decide.StoreIdempotency {
		t.Errorf("outages after the claim failed = %+v, want the idempotency store", l)
	}
}

func TestSagaStoreOutageHoldsTheDelivery(t *testing.T) {
	o, _ := testOutages(t)
	b := newSagaBus(t)
	var sc *sagaCall
	for _, c := range b.calls {
		if c.c.Step == "take-payment" && !strings.Contains(c.c.Queue, "compensate") {
			sc = c
		}
	}
	sc.store = downSagas{}
	sc.outage = o.failed
	in := decide.InboundOf(decide.Message{MessageID: "m1", Headers: decide.Table{plan.HeaderAttempt: int64(1)}, Body: []byte(`{}`)})
	dec := sc.step(t.Context(), &delivery{in: in})
	if dec.Outcome != decide.OutcomeHeld || len(dec.Publish) != 1 || dec.Publish[0].Headers[plan.HeaderAttempt] != int64(1) {
		t.Fatalf("saga step with its store down = %s %+v, want held, attempt still 1", dec.Outcome, dec.Publish)
	}
	if l := o.list(); len(l) != 1 || l[0].Store != decide.StoreSaga {
		t.Errorf("outages after the saga store failed = %+v, want the saga store", l)
	}
}

// downSagas is a saga store that is down.
type downSagas struct{}

func (downSagas) CreateSaga(context.Context, stores.SagaInstance) (stores.SagaInstance, bool, error) {
	return stores.SagaInstance{}, false, errDown
}

func (downSagas) GetSaga(context.Context, string) (stores.SagaInstance, bool, error) {
	return stores.SagaInstance{}, false, errDown
}

func (downSagas) AdvanceSaga(context.Context, stores.SagaInstance) (stores.SagaInstance, error) {
	return stores.SagaInstance{}, errDown
}
