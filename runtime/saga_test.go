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
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// sagaFlow has two sagas: place-order (charge, reserve only for orders
// with items, book; the payload's "fail" names the handlers that fail for
// good, comma-separated) and slow-order, whose second step never succeeds in time and whose
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
sagas:
  - name: place-order
    input: Order
    steps:
      - {name: charge,  handler: p.charge,  compensate: p.refund,  retry: {max_attempts: 2, initial_delay: 100ms, max_delay: 100ms}}
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
			case name == "wait":
				return decide.Result{}, errors.New("not yet")
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
	msg, err := decide.FirstMessage(r.plan, decide.Target{Saga: saga}, []byte(payload), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	reply, err := ops.Send(t.Context(), r.url, msg, 30*time.Second)
	if err != nil {
		t.Fatalf("send --saga %s %s: %v", saga, payload, err)
	}
	var sum decide.SagaSummary
	if err := json.Unmarshal(reply.Payload, &sum); err != nil {
		t.Fatalf("send --saga %s: the reply's body %q is not a summary: %v", saga, reply.Payload, err)
	}
	return msg, reply, sum
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
	rig.start(t)
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
		{"a skipped step is not compensated", "place-order", `{"id":"o4","fail":"book","items":[]}`,
			"compensated", "charge=compensated reserve=skipped book=failed", []string{"charge", "book", "refund"}, nil},
		{"a failing compensation ends unresolved and the rest still run", "place-order", `{"id":"o5","items":[1],"fail":"book,release"}`,
			"unresolved", "charge=compensated reserve=compensation_failed book=failed", []string{"charge", "reserve", "book", "release", "refund"}, []string{"reserve"}},
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
	rig.effects.mu.Lock()
	defer rig.effects.mu.Unlock()
	for _, b := range rig.effects.bad {
		t.Error(b)
	}
}
