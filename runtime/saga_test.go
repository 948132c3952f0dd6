package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// sagaFlow has two sagas: place-order (charge, reserve only for orders
// with items, book; the payload's "fail" names the handlers that fail for
// good, comma-separated, a name~ one that fails every try, retryably, and
// charge-output a charge whose result is not a Payment) and slow-order, whose second step never succeeds in time and whose
// timeout compensates it.
const sagaFlow = `version: acemq.flow/v1
name: shop
plugins:
  p: {command: ./p}
types:
  Order:
    type: object
    required: [id]
    properties:
      id: {type: string}
      items: {type: array}
      fail: {type: string}
  Payment:
    type: object
    required: [payment]
    properties:
      payment: {type: string}
sagas:
  - name: place-order
    input: Order
    steps:
      - {name: charge,  handler: p.charge,  compensate: p.refund,  output: Payment, retry: {max_attempts: 2, initial_delay: 100ms, max_delay: 100ms}}
      - {name: reserve, handler: p.reserve, compensate: p.release, when: "len(payload.items) > 0", retry: {max_attempts: 2, initial_delay: 100ms, max_delay: 100ms}}
      - {name: book,    handler: p.book,    retry: {max_attempts: 2, initial_delay: 100ms, max_delay: 100ms}}
  - name: slow-order
    input: Order
    timeout: 2s
    steps:
      - {name: charge, handler: p.charge, compensate: p.refund}
      - {name: wait,   handler: p.wait, retry: {max_attempts: 3, initial_delay: 10m, max_delay: 10m}}
`

// sagaEffects records every handler call of the saga tests, by order id.
type sagaEffects struct {
	mu    sync.Mutex
	calls map[string][]string // order id → handlers, in call order
	bad   []string            // what a handler was given that it should not have been
}

func (e *sagaEffects) of(id string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls[id])
}

func (e *sagaEffects) handlers() map[string]runtime.HandlerFunc {
	hs := map[string]runtime.HandlerFunc{}
	for _, name := range []string{"charge", "refund", "reserve", "release", "book", "wait"} {
		hs["p."+name] = func(_ context.Context, req runtime.Request) (decide.Result, error) {
			var o struct{ ID, Fail string }
			if err := json.Unmarshal(req.Payload, &o); err != nil {
				return decide.Result{}, fmt.Errorf("%w: %v", decide.ErrFatal, err)
			}
			e.mu.Lock()
			e.calls[o.ID] = append(e.calls[o.ID], name)
			if name == "refund" && string(req.StepOutput) != `{"payment":"pay-`+o.ID+`"}` {
				e.bad = append(e.bad, fmt.Sprintf("refund of %s got step output %q", o.ID, req.StepOutput))
			}
			if req.Queue == "" || req.ReceivedAt.IsZero() {
				e.bad = append(e.bad, fmt.Sprintf("%s of %s got no queue or receive time", name, o.ID))
			}
			e.mu.Unlock()
			switch {
			case slices.Contains(strings.Split(o.Fail, ","), name):
				return decide.Result{}, fmt.Errorf("%w: %s refused order %s", decide.ErrFatal, name, o.ID)
			case slices.Contains(strings.Split(o.Fail, ","), name+"~"):
				return decide.Result{}, fmt.Errorf("%s cannot do order %s now", name, o.ID)
			case name == "wait":
				return decide.Result{}, errors.New("not yet")
			case name == "charge" && slices.Contains(strings.Split(o.Fail, ","), "charge-output"):
				return decide.Result{Payload: []byte(`{"payment":1}`)}, nil
			case name == "charge":
				return decide.Result{Payload: []byte(`{"payment":"pay-` + o.ID + `"}`)}, nil
			}
			return decide.Result{Payload: []byte(`{}`)}, nil
		}
	}
	return hs
}

// sagaRig is the sagas of sagaFlow run on the broker (a vhost of the
// test's own) with their instances in PostgreSQL (a schema of its own).
type sagaRig struct {
	url     string
	plan    *plan.Plan
	store   *postgres.Store
	effects *sagaEffects
}

func newSagaRig(t *testing.T) *sagaRig {
	t.Helper()
	url := testenv.VHost(t)
	st, err := postgres.Open(t.Context(), testenv.PostgresSchema(t), stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	set, err := spec.Load(testenv.FlowFS(sagaFlow), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	return &sagaRig{url: url, plan: pl, store: st, effects: &sagaEffects{calls: map[string][]string{}}}
}

// start runs one runtime replica on the rig until the test ends.
func (r *sagaRig) start(t *testing.T) *runtime.Runtime {
	t.Helper()
	return runtimetest.Run(t, r.url, r.plan, runtime.Options{Handlers: r.effects.handlers(), Store: r.store, Sagas: r.store})
}

// send starts an instance of saga with payload and waits for its reply.
func (r *sagaRig) send(t *testing.T, saga, payload string) (decide.Message, *ops.Reply, decide.SagaSummary) {
	t.Helper()
	msg, reply, sum, err := r.trySend(t.Context(), saga, payload)
	if err != nil {
		t.Fatal(err)
	}
	return msg, reply, sum
}

// trySend is send for other goroutines than the test's.
func (r *sagaRig) trySend(ctx context.Context, saga, payload string) (decide.Message, *ops.Reply, decide.SagaSummary, error) {
	var sum decide.SagaSummary
	msg, err := decide.FirstMessage(r.plan, decide.Target{Saga: saga}, []byte(payload), time.Now())
	if err != nil {
		return msg, nil, sum, err
	}
	reply, err := ops.Send(ctx, r.url, msg, 60*time.Second)
	if err != nil {
		return msg, nil, sum, fmt.Errorf("send --saga %s %s: %w", saga, payload, err)
	}
	if err := json.Unmarshal(reply.Payload, &sum); err != nil {
		return msg, nil, sum, fmt.Errorf("send --saga %s: the reply's body %q is not a summary: %w", saga, reply.Payload, err)
	}
	return msg, reply, sum, nil
}

func stepStates(sum decide.SagaSummary) string {
	var out []string
	for _, st := range sum.Steps {
		out = append(out, st.Name+"="+st.State)
	}
	return strings.Join(out, " ")
}

// TestSagasRunOnTheBroker: each way an instance can end, end to end on
// RabbitMQ and PostgreSQL: the reply's outcome and summary, the handlers
// called and in which order, and the instance as the store keeps it.
func TestSagasRunOnTheBroker(t *testing.T) {
	rig := newSagaRig(t)
	rt := rig.start(t)
	cases := []struct {
		name, saga, payload string
		outcome, steps      string
		calls               []string
		notUndone           []string
	}{
		{"every step completes", "place-order", `{"id":"o1","items":[1]}`,
			"completed", "charge=completed reserve=completed book=completed", []string{"charge", "reserve", "book"}, nil},
		{"a step whose when is false is skipped", "place-order", `{"id":"o2","items":[]}`,
			"completed", "charge=completed reserve=skipped book=completed", []string{"charge", "book"}, nil},
		{"a fatal third step compensates the others in reverse", "place-order", `{"id":"o3","items":[1],"fail":"book"}`,
			"compensated", "charge=compensated reserve=compensated book=failed", []string{"charge", "reserve", "book", "release", "refund"}, nil},
		{"a step whose retries run out compensates the others", "place-order", `{"id":"o8","items":[1],"fail":"book~"}`,
			"compensated", "charge=compensated reserve=compensated book=failed", []string{"charge", "reserve", "book", "book", "release", "refund"}, nil},
		{"a skipped step is not compensated", "place-order", `{"id":"o4","fail":"book","items":[]}`,
			"compensated", "charge=compensated reserve=skipped book=failed", []string{"charge", "book", "refund"}, nil},
		{"a failing compensation ends unresolved and the rest still run", "place-order", `{"id":"o5","items":[1],"fail":"book,release"}`,
			"unresolved", "charge=compensated reserve=compensation_failed book=failed", []string{"charge", "reserve", "book", "release", "refund"}, []string{"reserve"}},
		{"a result that is not the step's output type fails it for good", "place-order", `{"id":"o7","items":[1],"fail":"charge-output"}`,
			"compensated", "charge=failed reserve=pending book=pending", []string{"charge"}, nil},
		{"the timeout compensates a running instance", "slow-order", `{"id":"o6"}`,
			"compensated", "charge=compensated wait=failed", []string{"charge", "wait", "refund"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg, reply, sum := rig.send(t, tc.saga, tc.payload)
			if reply.Outcome != tc.outcome || sum.State != tc.outcome || sum.ID != msg.MessageID || sum.Saga != tc.saga {
				t.Errorf("reply: outcome %q, summary %s %s %s; want %s, instance %s of %s", reply.Outcome, sum.Saga, sum.ID, sum.State, tc.outcome, msg.MessageID, tc.saga)
			}
			if got := stepStates(sum); got != tc.steps {
				t.Errorf("summary steps %s, want %s", got, tc.steps)
			}
			if !slices.Equal(sum.NotUndone, tc.notUndone) {
				t.Errorf("summary not_undone %v, want %v", sum.NotUndone, tc.notUndone)
			}
			var id struct{ ID string }
			_ = json.Unmarshal([]byte(tc.payload), &id)
			if got := rig.effects.of(id.ID); !slices.Equal(got, tc.calls) {
				t.Errorf("handlers called %v, want %v", got, tc.calls)
			}
			inst, ok, err := rig.store.GetSaga(t.Context(), msg.MessageID)
			if err != nil || !ok || string(inst.State) != tc.outcome || inst.EndedAt.IsZero() {
				t.Errorf("store: instance %s = %+v, %v, %v; want it %s, ended", msg.MessageID, inst.State, ok, err, tc.outcome)
			}
		})
	}
	t.Run("the timeout is named in the step it failed", func(t *testing.T) {
		list, err := rig.store.ListSagas(t.Context(), stores.SagaFilter{Saga: "slow-order"})
		if err != nil || len(list) != 1 {
			t.Fatalf("ListSagas(slow-order) = %d instances, %v; want 1", len(list), err)
		}
		if e := list[0].Steps[1].Error; !strings.Contains(e, "timeout (2s)") {
			t.Errorf("step wait's error %q, want it to name the saga's timeout", e)
		}
	})
	t.Run("the runtime's metrics count the store's instances", func(t *testing.T) {
		got := map[string]float64{}
		mfs, err := rt.Metrics().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["saga"] == "place-order" {
					got[mf.GetName()+"/"+labels["state"]] = m.GetGauge().GetValue()
				}
			}
		}
		want := map[string]float64{"acemq_saga_instances/completed": 2, "acemq_saga_instances/compensated": 4,
			"acemq_saga_instances/unresolved": 1, "acemq_saga_instances/running": 0, "acemq_saga_unresolved/": 1}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %v, want %v (all place-order series: %v)", k, got[k], v, got)
			}
		}
	})
	rig.effects.mu.Lock()
	defer rig.effects.mu.Unlock()
	for _, b := range rig.effects.bad {
		t.Error(b)
	}
}

// TestSagaDuplicateDeliveryRunsTheHandlerOnce: the message that starts an
// instance, published twice with the same id, runs the first step's handler
// once and starts one instance; the second copy is counted a duplicate.
func TestSagaDuplicateDeliveryRunsTheHandlerOnce(t *testing.T) {
	rig := newSagaRig(t)
	rt := rig.start(t)
	msg, err := decide.FirstMessage(rig.plan, decide.Target{Saga: "place-order"}, []byte(`{"id":"d1","items":[1]}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ch := testenv.ConfirmedChannel(t, rig.url)
	for range 2 {
		if err := ch.PublishWithContext(t.Context(), msg.Exchange, msg.RoutingKey, true, false, wire.Publishing(msg).Publishing); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		st, err := rt.Consumer(t.Context(), plan.SagaStepConsumerID("place-order", "charge"))
		if err != nil {
			return err
		}
		inst, ok, err := rig.store.GetSaga(t.Context(), msg.MessageID)
		if err != nil || !ok || inst.State != stores.SagaCompleted || st.Counters[decide.OutcomeDuplicate] != 1 {
			return testenv.Errorf("instance %v (%v, %v), charge's duplicates %d; want it completed and one duplicate", inst.State, ok, err, st.Counters[decide.OutcomeDuplicate])
		}
		return nil
	})
	if got := rig.effects.of("d1"); !slices.Equal(got, []string{"charge", "reserve", "book"}) {
		t.Errorf("handlers called %v, want each step once: charge, reserve, book", got)
	}
	if list, err := rig.store.ListSagas(t.Context(), stores.SagaFilter{Saga: "place-order"}); err != nil || len(list) != 1 {
		t.Errorf("ListSagas = %d instances, %v; want one", len(list), err)
	}
}

// TestSagasOnTwoReplicasCompleteOnce: two runtimes on the same queues and
// store run 20 instances at once; each completes, once, every step's
// handler called once.
func TestSagasOnTwoReplicasCompleteOnce(t *testing.T) {
	rig := newSagaRig(t)
	rig.start(t)
	rig.start(t)
	const n = 20
	var wg sync.WaitGroup
	sums := make([]decide.SagaSummary, n)
	outcomes := make([]string, n)
	for i := range n {
		wg.Go(func() {
			_, reply, sum, err := rig.trySend(t.Context(), "place-order", fmt.Sprintf(`{"id":"r%d","items":[1]}`, i))
			if err != nil {
				t.Error(err)
				return
			}
			sums[i], outcomes[i] = sum, reply.Outcome
		})
	}
	wg.Wait()
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		if outcomes[i] != decide.SagaCompleted || stepStates(sums[i]) != "charge=completed reserve=completed book=completed" {
			t.Errorf("%s: outcome %q, steps %s; want completed, every step completed", id, outcomes[i], stepStates(sums[i]))
		}
		if got := rig.effects.of(id); !slices.Equal(got, []string{"charge", "reserve", "book"}) {
			t.Errorf("%s: handlers called %v, want each step once: charge, reserve, book", id, got)
		}
	}
	list, err := rig.store.ListSagas(t.Context(), stores.SagaFilter{Saga: "place-order", State: stores.SagaCompleted})
	if err != nil || len(list) != n {
		t.Errorf("ListSagas(completed) = %d instances, %v; want %d", len(list), err, n)
	}
}

// TestSagaMessageForNoInstanceIsDeadLettered: a step's message naming an
// instance the store does not have (a purged or replaced store, a foreign
// publisher) lands in the step's .dlq saying so, the handler not called.
func TestSagaMessageForNoInstanceIsDeadLettered(t *testing.T) {
	rig := newSagaRig(t)
	rig.start(t)
	ch := testenv.ConfirmedChannel(t, rig.url)
	m := decide.Message{Exchange: "place-order", RoutingKey: "reserve", MessageID: "stray-1", ContentType: "application/json",
		Body: []byte(`{"id":"n1","items":[1]}`), Headers: decide.Table{plan.HeaderSagaID: "no-such-instance", plan.HeaderAttempt: int64(1)}}
	if err := ch.PublishWithContext(t.Context(), m.Exchange, m.RoutingKey, true, false, wire.Publishing(m).Publishing); err != nil {
		t.Fatal(err)
	}
	dlq := plan.DeadLetterQueue(plan.SagaStepQueue("place-order", "reserve"))
	var reason string
	testenv.Eventually(t, 30*time.Second, func() error {
		d, ok, err := ch.Get(dlq, true)
		if err != nil {
			return err
		}
		if !ok {
			return testenv.Errorf("%s is empty", dlq)
		}
		if d.MessageId != "stray-1" {
			return testenv.Errorf("%s holds %s, want stray-1", dlq, d.MessageId)
		}
		reason = decide.HeaderText(d.Headers[plan.HeaderError])
		return nil
	})
	if !strings.Contains(reason, `no instance "no-such-instance" in the store`) || !strings.Contains(reason, "nothing was run") {
		t.Errorf("dead-lettered with %q, want the missing instance named and nothing run", reason)
	}
	if got := rig.effects.of("n1"); len(got) != 0 {
		t.Errorf("handlers called %v for a message of no instance, want none", got)
	}
}
