package decide_test

import (
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

const firstSagaFlow = `version: acemq.flow/v1
name: shop
plugins:
  p: {command: ./p}
types:
  Order: {type: object, required: [id], properties: {id: {type: string}}}
sagas:
  - name: place-order
    input: Order
    timeout: 1h
    steps:
      - {name: take-payment, handler: p.charge, compensate: p.refund}
      - {name: book, handler: p.book}
`

func firstSagaPlan(t *testing.T) *plan.Plan {
	t.Helper()
	set, err := spec.Load(fstest.MapFS{"f.yaml": {Data: []byte(firstSagaFlow)}}, "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFirstMessageStartsASaga: send --saga's message goes to the saga's
// exchange with its first step's key, its id the instance's, with no
// x-acemq-saga-id (that is what makes it a start); an unknown saga and a
// payload that is not its input are refused, naming what is wrong.
func TestFirstMessageStartsASaga(t *testing.T) {
	p := firstSagaPlan(t)
	now := time.Date(2026, 9, 9, 14, 0, 0, 0, time.UTC)
	m, err := decide.FirstMessage(p, decide.Target{Saga: "place-order"}, []byte(`{"id":"o1"}`), now)
	if err != nil {
		t.Fatal(err)
	}
	if m.Exchange != "place-order" || m.RoutingKey != "take-payment" || m.Type != "Order" || m.CorrelationID != m.MessageID ||
		m.Headers[plan.HeaderOrigin] != "shop" || m.Headers[plan.HeaderSaga] != "place-order" {
		t.Errorf("FirstMessage(saga place-order) = %s/%s type %s, correlation %s of %s, headers %v", m.Exchange, m.RoutingKey, m.Type, m.CorrelationID, m.MessageID, m.Headers)
	}
	if _, ok := m.Headers[plan.HeaderSagaID]; ok {
		t.Errorf("FirstMessage(saga place-order) carries %s; the starting message must not", plan.HeaderSagaID)
	}
	if id, start := decide.SagaInstanceID(decide.InboundOf(m)); !start || id != m.MessageID {
		t.Errorf("SagaInstanceID(the first message) = %s, %v; want its own id, a start", id, start)
	}
	for _, tc := range []struct{ saga, payload, want string }{
		{"refund", `{"id":"o1"}`, `no saga "refund" in the flows; known: [place-order]`},
		{"place-order", `{"order":1}`, `saga "place-order": the payload is not a valid Order`},
	} {
		if _, err := decide.FirstMessage(p, decide.Target{Saga: tc.saga}, []byte(tc.payload), now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FirstMessage(saga %s, %s) = %v, want an error containing %q", tc.saga, tc.payload, err, tc.want)
		}
	}
}

// TestSagaTimeoutMessage: the timeout of an instance is addressed to the
// saga's timeout queue, due at its start plus the timeout, with one id per
// instance; a saga without a timeout has none.
func TestSagaTimeoutMessage(t *testing.T) {
	p := firstSagaPlan(t)
	started := time.Date(2026, 9, 9, 14, 0, 0, 0, time.UTC)
	inst := decide.SagaInstance{Saga: "place-order", ID: "i1", CorrelationID: "c1", StartedAt: started}
	m, due, ok := decide.SagaTimeoutMessage(&p.Sagas[0], inst, started.Add(time.Minute))
	if !ok || m.Exchange != "place-order" || m.RoutingKey != plan.TimeoutKey || !due.Equal(started.Add(time.Hour)) ||
		m.Headers[plan.HeaderSagaID] != "i1" || m.CorrelationID != "c1" || m.MessageID != decide.DerivedMessageID(plan.TimeoutQueue("place-order"), "i1") {
		t.Errorf("SagaTimeoutMessage = %s/%s id %s due %s (%v), headers %v", m.Exchange, m.RoutingKey, m.MessageID, due, ok, m.Headers)
	}
	again, _, _ := decide.SagaTimeoutMessage(&p.Sagas[0], inst, started.Add(time.Hour))
	if again.MessageID != m.MessageID {
		t.Errorf("SagaTimeoutMessage published again has id %s, want %s (the same instance)", again.MessageID, m.MessageID)
	}
	none := p.Sagas[0]
	none.Timeout = 0
	if _, _, ok := decide.SagaTimeoutMessage(&none, inst, started); ok {
		t.Error("SagaTimeoutMessage for a saga without a timeout: ok, want none")
	}
}
