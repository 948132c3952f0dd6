package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
)

const sagaStepFlow = `version: acemq.flow/v1
name: shop
plugins:
  p: {command: ./p}
sagas:
  - name: place-order
    steps:
      - {name: take-payment,  handler: p.charge,  compensate: p.refund}
      - {name: reserve-stock, handler: p.reserve, compensate: p.release, when: "len(payload.items) > 0"}
      - {name: book-courier,  handler: p.book}
`

// sagaBus carries the saga wrapper's decisions as the broker would, one
// message at a time: a message to the saga's exchange goes to the queue its
// routing key names, a retry rung gives its message back to its queue, a
// .dlq keeps it, a reply is kept. The handlers are functions of the test.
type sagaBus struct {
	t        *testing.T
	saga     *plan.Saga
	store    *memory.Store
	calls    map[string]*sagaCall // by queue
	pending  []decide.Message
	replies  []decide.Message
	dead     []decide.Message
	handled  []string // handler names, in call order
	requests map[string]Request
	fail     map[string]error // handler → the error it returns
}

func newSagaBus(t *testing.T) *sagaBus {
	t.Helper()
	set, err := spec.Load(fstest.MapFS{"f.yaml": {Data: []byte(sagaStepFlow)}}, "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	store, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	b := &sagaBus{t: t, saga: &p.Sagas[0], store: store, calls: map[string]*sagaCall{},
		requests: map[string]Request{}, fail: map[string]error{}}
	consumer := func(queue, step, handler string) *plan.Consumer {
		return &plan.Consumer{ID: queue, Kind: plan.KindSagaStep, Flow: "shop", Queue: queue, Step: step, Handler: handler,
			Retry: plan.Retry{MaxAttempts: 2, Rungs: []plan.Rung{{Attempt: 2, Delay: plan.Duration(time.Second), Queue: plan.RetryQueue(queue, time.Second)}}}}
	}
	for _, st := range b.saga.Steps {
		q := plan.SagaStepQueue(b.saga.Name, st.Name)
		b.calls[q] = &sagaCall{saga: b.saga, c: consumer(q, st.Name, st.Handler), store: store, call: b.handle, now: time.Now}
		if st.Compensate != "" {
			cq := plan.CompensateQueue(b.saga.Name, st.Name)
			b.calls[cq] = &sagaCall{saga: b.saga, c: consumer(cq, st.Name, st.Compensate), store: store, call: b.handle, now: time.Now}
		}
	}
	return b
}

func (b *sagaBus) handle(_ context.Context, req Request) (decide.Result, error) {
	b.handled = append(b.handled, req.Handler)
	b.requests[req.Handler] = req
	if err := b.fail[req.Handler]; err != nil {
		return decide.Result{}, err
	}
	return decide.Result{Payload: []byte(`{"by":"` + req.Handler + `"}`)}, nil
}

// queueOf is where the broker puts m.
func (b *sagaBus) queueOf(m decide.Message) string {
	if m.Exchange == plan.SagaExchange(b.saga.Name) {
		return b.saga.Name + "." + m.RoutingKey
	}
	return m.RoutingKey
}

// deliver hands one message to its queue's wrapper and returns the
// decision, without carrying it out.
func (b *sagaBus) deliver(m decide.Message) decide.Decision {
	b.t.Helper()
	q := b.queueOf(m)
	sc := b.calls[q]
	if sc == nil {
		b.t.Fatalf("no saga consumer on queue %q", q)
	}
	return sc.step(b.t.Context(), &delivery{in: decide.InboundOf(m), received: time.Now()})
}

// carry puts what a decision publishes where the broker would.
func (b *sagaBus) carry(dec decide.Decision) {
	for _, p := range dec.Publish {
		switch q := b.queueOf(p.Message); {
		case p.Headers[plan.HeaderOutcome] != nil:
			b.replies = append(b.replies, p.Message)
		case strings.HasSuffix(q, ".dlq"):
			b.dead = append(b.dead, p.Message)
		case strings.Contains(q, ".retry."):
			// The rung's TTL passes: the message is back on its queue.
			m := p.Message
			m.Exchange, m.RoutingKey = "", q[:strings.Index(q, ".retry.")]
			b.pending = append(b.pending, m)
		default:
			b.pending = append(b.pending, p.Message)
		}
	}
}

// run delivers until nothing is left, and returns the decisions' outcomes.
func (b *sagaBus) run() []string {
	var outcomes []string
	for len(b.pending) > 0 {
		m := b.pending[0]
		b.pending = b.pending[1:]
		dec := b.deliver(m)
		outcomes = append(outcomes, dec.Outcome)
		b.carry(dec)
	}
	return outcomes
}

// sagaStartMessage is what `send --saga place-order` publishes.
func sagaStartMessage(id, body string) decide.Message {
	return decide.Message{Exchange: "place-order", RoutingKey: "take-payment", MessageID: id, CorrelationID: id, ReplyTo: "requester",
		Body: []byte(body), Headers: decide.Table{}}
}

func (b *sagaBus) instance(id string) stores.SagaInstance {
	b.t.Helper()
	inst, ok, err := b.store.GetSaga(b.t.Context(), id)
	if err != nil || !ok {
		b.t.Fatalf("GetSaga(%s) = %v, %v", id, ok, err)
	}
	return inst
}

func (b *sagaBus) wantEnd(id, state string, handled []string) {
	b.t.Helper()
	if !slices.Equal(b.handled, handled) {
		b.t.Errorf("handlers called %v, want %v", b.handled, handled)
	}
	if inst := b.instance(id); string(inst.State) != state {
		b.t.Errorf("instance %s is %s, want %s", id, inst.State, state)
	}
	if len(b.replies) != 1 || decide.HeaderText(b.replies[0].Headers[plan.HeaderOutcome]) != state || b.replies[0].RoutingKey != "requester" {
		b.t.Errorf("replies %v, want one %s reply to the requester", b.replies, state)
	}
}

func TestSagaWrapperRunsEachStepOnceAndCompletes(t *testing.T) {
	b := newSagaBus(t)
	b.pending = append(b.pending, sagaStartMessage("m-1", `{"items":[1]}`))
	b.run()
	b.wantEnd("m-1", "completed", []string{"p.charge", "p.reserve", "p.book"})
	if r := b.requests["p.reserve"]; r.Queue != "place-order.reserve-stock" || r.Compensate || r.StepOutput != nil || string(r.Payload) != `{"items":[1]}` {
		t.Errorf("reserve's request: queue %q compensate %v step output %q payload %s; want its queue, the saga's input, no compensation", r.Queue, r.Compensate, r.StepOutput, r.Payload)
	}
	if inst := b.instance("m-1"); string(inst.Steps[0].Output) != `{"by":"p.charge"}` || inst.Steps[2].State != stores.StepCompleted {
		t.Errorf("the store holds steps %+v, want each completed with its output", inst.Steps)
	}
}

func TestSagaWrapperSkipsAStepWhoseWhenIsFalse(t *testing.T) {
	b := newSagaBus(t)
	b.pending = append(b.pending, sagaStartMessage("m-1", `{"items":[]}`))
	b.run()
	b.wantEnd("m-1", "completed", []string{"p.charge", "p.book"})
	if st := b.instance("m-1").Steps[1].State; st != stores.StepSkipped {
		t.Errorf("reserve-stock is %s, want skipped", st)
	}
}

func TestSagaWrapperCompensatesInReverseWithEachStepsOutput(t *testing.T) {
	b := newSagaBus(t)
	b.fail["p.book"] = fmt.Errorf("no courier for this address: %w", decide.ErrFatal)
	b.pending = append(b.pending, sagaStartMessage("m-1", `{"items":[1]}`))
	b.run()
	b.wantEnd("m-1", "compensated", []string{"p.charge", "p.reserve", "p.book", "p.release", "p.refund"})
	r := b.requests["p.refund"]
	if !r.Compensate || string(r.StepOutput) != `{"by":"p.charge"}` || r.Queue != "place-order.take-payment.compensate" || string(r.Payload) != `{"items":[1]}` {
		t.Errorf("refund's request: compensate %v step output %q queue %q payload %s; want a compensation with charge's output and the saga's input", r.Compensate, r.StepOutput, r.Queue, r.Payload)
	}
	if st := b.instance("m-1").Steps[2]; st.State != stores.StepFailed || !strings.Contains(st.Error, "no courier") {
		t.Errorf("book-courier recorded %+v, want failed with its error", st)
	}
}

func TestSagaWrapperCompensatesOnceRetriesAreExhausted(t *testing.T) {
	b := newSagaBus(t)
	b.fail["p.book"] = errors.New("courier API down")
	b.pending = append(b.pending, sagaStartMessage("m-1", `{"items":[1]}`))
	outcomes := b.run()
	b.wantEnd("m-1", "compensated", []string{"p.charge", "p.reserve", "p.book", "p.book", "p.release", "p.refund"})
	if !slices.Contains(outcomes, decide.OutcomeRetried) {
		t.Errorf("outcomes %v, want the first failure retried through the rung", outcomes)
	}
	if st := b.instance("m-1").Steps[2]; st.Attempts != 2 || !strings.Contains(st.Error, "attempt 2 of 2 failed: courier API down") {
		t.Errorf("book-courier recorded %+v, want 2 attempts and the exhausted error", st)
	}
}

func TestSagaWrapperRunsTheRestWhenACompensationFails(t *testing.T) {
	b := newSagaBus(t)
	b.fail["p.book"] = fmt.Errorf("no van: %w", decide.ErrFatal)
	b.fail["p.release"] = fmt.Errorf("warehouse closed: %w", decide.ErrFatal)
	b.pending = append(b.pending, sagaStartMessage("m-1", `{"items":[1]}`))
	b.run()
	b.wantEnd("m-1", "unresolved", []string{"p.charge", "p.reserve", "p.book", "p.release", "p.refund"})
	if st := b.instance("m-1").Steps[1]; st.State != stores.StepCompensationFailed {
		t.Errorf("reserve-stock is %s, want compensation_failed", st.State)
	}
}

// TestSagaWrapperHealsACrashBetweenTheWriteAndThePublish: the charge's
// outcome is written but what it sends is lost and the delivery not
// acknowledged (the runtime died); the redelivery does not charge again,
// and sends the next step's message again, so the instance completes.
func TestSagaWrapperHealsACrashBetweenTheWriteAndThePublish(t *testing.T) {
	b := newSagaBus(t)
	start := sagaStartMessage("m-1", `{"items":[1]}`)
	lost := b.deliver(start)
	if len(lost.Publish) != 1 || lost.Publish[0].RoutingKey != "reserve-stock" {
		t.Fatalf("the first delivery decided %+v, want reserve-stock's message", lost)
	}
	again := b.deliver(start) // the redelivery
	if again.Outcome != decide.OutcomeDuplicate || len(again.Publish) != 1 || again.Publish[0].MessageID != lost.Publish[0].MessageID {
		t.Fatalf("the redelivery decided %+v, want a duplicate that sends reserve-stock's message again, same id", again)
	}
	b.carry(again)
	b.run()
	b.wantEnd("m-1", "completed", []string{"p.charge", "p.reserve", "p.book"})
	// A step's message arriving once more at the end runs nothing.
	b.handled = nil
	if dec := b.deliver(lost.Publish[0].Message); dec.Outcome != decide.OutcomeDuplicate || len(b.handled) != 0 {
		t.Errorf("reserve-stock's message after the end decided %s and called %v, want a duplicate that calls nothing", dec.Outcome, b.handled)
	}
}

func TestSagaWrapperDeadLettersAMessageForNoInstance(t *testing.T) {
	b := newSagaBus(t)
	m := decide.Message{Exchange: "place-order", RoutingKey: "reserve-stock", MessageID: "x-1",
		Headers: decide.Table{plan.HeaderSagaID: "gone"}, Body: []byte(`{}`)}
	dec := b.deliver(m)
	if dec.Outcome != decide.OutcomeDeadLettered || !strings.Contains(dec.Reason, `no instance "gone"`) || len(b.handled) != 0 {
		t.Fatalf("a message for no instance decided %s (%s), called %v; want dead-lettered saying so, nothing called", dec.Outcome, dec.Reason, b.handled)
	}
	b.carry(dec)
	if len(b.dead) != 1 || b.dead[0].RoutingKey != "place-order.reserve-stock.dlq" {
		t.Errorf("dead letters %v, want the message in place-order.reserve-stock.dlq", b.dead)
	}
}
