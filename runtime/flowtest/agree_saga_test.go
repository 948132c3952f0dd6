package flowtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/flowtest"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

const agreeSagaFlow = `version: acemq.flow/v1
name: agree-saga
plugins:
  k: {command: ./not-started}
types:
  Order:
    type: object
    required: [id]
    properties: {id: {type: string}, items: {type: array}}
sagas:
  - name: order
    input: Order
    steps:
      - {name: charge,  handler: k.charge,  compensate: k.refund,  retry: {max_attempts: 2, initial_delay: 1s, max_delay: 1s, jitter: 0}}
      - {name: reserve, handler: k.reserve, compensate: k.release, when: "len(payload.items) > 0", retry: {max_attempts: 2, initial_delay: 1s, max_delay: 1s, jitter: 0}}
      - {name: book,    handler: k.book, retry: {max_attempts: 2, initial_delay: 1s, max_delay: 1s, jitter: 0}}
`

var agreeSagaCases = []struct{ name, payload, handlers string }{
	{"every step succeeds", `{"id":"o1","items":[1]}`, "{}"},
	{"the booking fails for good and the steps done are undone in reverse", `{"id":"o2","items":[1]}`, "{k.book: {fatal: no courier}}"},
	{"a refund that fails leaves the instance unresolved", `{"id":"o3","items":[1]}`, "{k.book: {fatal: no courier}, k.refund: {fatal: refused}}"},
	{"an order without items skips the reservation, which is not undone", `{"id":"o4","items":[]}`, "{k.book: {fatal: no courier}}"},
	{"a booking that fails once is retried, then succeeds", `{"id":"o5","items":[1]}`, "{k.book: [{fail: busy}, echo]}"},
}

// TestEngineAndHarnessAgreeOnSagas: the engine (instances in the memory
// store) and the harness agree on each instance's end, its steps' states
// and attempts, the compensations in the order they ran, the route and
// the retries.
func TestEngineAndHarnessAgreeOnSagas(t *testing.T) {
	url := testenv.VHost(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.yaml"), []byte(agreeSagaFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	text.WriteString("version: acemq.flowtest/v1\ncases:\n")
	for _, c := range agreeSagaCases {
		fmt.Fprintf(&text, "  - name: %s\n    handlers: %s\n    steps: [{run: until_idle}]\n", c.name, c.handlers)
	}
	file, ds := flowtest.Parse(filepath.Join(dir, "agree.flowtest.yaml"), []byte(text.String()))
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	pl, ds := flowtest.LoadPlan(file)
	if pl == nil {
		t.Fatal(ds)
	}
	st, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var current *flowtest.Case
	var route, comps []string
	hs := map[string]runtime.HandlerFunc{}
	for _, name := range []string{"k.charge", "k.refund", "k.reserve", "k.release", "k.book"} {
		hs[name] = func(_ context.Context, req runtime.Request) (decide.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			o := flowtest.Outcome{}
			if h := current.Handlers[name]; h != nil && len(h.Outcomes) > 0 {
				o = h.Outcomes[min(max(req.Envelope.Attempt, 1)-1, len(h.Outcomes)-1)]
			}
			step := strings.TrimSuffix(strings.TrimPrefix(req.Queue, "order."), ".compensate")
			if req.Compensate {
				comps = append(comps, step)
			}
			switch {
			case o.Fatal != "":
				return decide.Result{}, agreeError{o.Fatal, true}
			case o.Fail != "":
				return decide.Result{}, agreeError{o.Fail, false}
			}
			if !req.Compensate {
				route = append(route, step)
			}
			return decide.Result{Payload: req.Payload}, nil
		}
	}
	rt := runtimetest.Run(t, url, pl, runtime.Options{Handlers: hs, Store: st, Sagas: st})
	ch := testenv.ConfirmedChannel(t, url)
	if _, err := ch.QueueDeclare("agree.replies", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	retried := map[string]int64{}

	for i, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			mu.Lock()
			current, route, comps = c, nil, nil
			mu.Unlock()
			payload := agreeSagaCases[i].payload
			m, err := decide.FirstMessage(pl, decide.Target{Saga: "order"}, []byte(payload), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			m.ReplyTo = "agree.replies"
			publish(t, ch, m)
			var reply amqp.Delivery
			testenv.Eventually(t, 60*time.Second, func() error {
				d, ok, err := ch.Get("agree.replies", true)
				if err != nil {
					return err
				}
				if !ok {
					return testenv.Errorf("no reply yet")
				}
				reply = d
				return nil
			})
			var sum decide.SagaSummary
			if err := json.Unmarshal(reply.Body, &sum); err != nil {
				t.Fatalf("the reply's body is not a saga summary: %v: %s", err, reply.Body)
			}
			var exp strings.Builder
			mu.Lock()
			fmt.Fprintf(&exp, "route: %s\n", yamlList(route))
			fmt.Fprintf(&exp, "replies: [{outcome: %q}]\n", decide.HeaderText(reply.Headers[plan.HeaderOutcome]))
			var steps []string
			for _, s := range sum.Steps {
				steps = append(steps, s.Name+": "+s.State)
			}
			fmt.Fprintf(&exp, "sagas: [{saga: order, state: %s, steps: {%s}, compensations: %s}]\n", sum.State, strings.Join(steps, ", "), yamlList(comps))
			mu.Unlock()
			exp.WriteString("retries: [")
			n := 0
			for _, cs := range pl.Consumers {
				if cs.Saga == "" {
					continue
				}
				status, err := rt.Consumer(t.Context(), cs.ID)
				if err != nil {
					t.Fatal(err)
				}
				for range status.Counters[decide.OutcomeRetried] - retried[cs.ID] {
					if n > 0 {
						exp.WriteString(", ")
					}
					n++
					fmt.Fprintf(&exp, "{queue: %s}", cs.Queue)
				}
				retried[cs.ID] = status.Counters[decide.OutcomeRetried]
			}
			exp.WriteString("]\n")

			caseText := fmt.Sprintf("version: acemq.flowtest/v1\ncases:\n  - name: x\n    handlers: %s\n    steps: [{send: {saga: order, payload: %s, reply_to: agree.replies}}, {run: until_idle}]\n    expect:\n%s",
				agreeSagaCases[i].handlers, payload, indent(exp.String(), "      "))
			hf, ds := flowtest.Parse(filepath.Join(dir, "x.flowtest.yaml"), []byte(caseText))
			if len(ds) > 0 {
				t.Fatalf("the engine's observations do not parse as a case: %v\n%s", ds, caseText)
			}
			r := flowtest.RunCase(t.Context(), pl, hf, hf.Cases[0], flowtest.Options{})
			for _, f := range r.Failures {
				t.Errorf("the harness disagrees with the engine: %s", f.Message())
			}
			if t.Failed() {
				t.Logf("the engine's observations:\n%s", exp.String())
			}
		})
	}
}
