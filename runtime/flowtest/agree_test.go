package flowtest_test

import (
	"context"
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
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// The engine on the real broker and the harness get the same flow, the
// same message and the same handlers' outcomes, and must agree on what
// happened: the route, the reply and its outcome, the dead letters (queue,
// kind, error, attempt) and how many retries each step made. The engine's
// observations are written as a case's exact expectations, which the
// harness must then meet.

const agreeFlow = `version: acemq.flow/v1
name: agree
plugins:
  k: {command: ./not-started}
pipelines:
  - name: p
    steps:
      - {name: a, handler: k.a, queue_type: classic, retry: {max_attempts: 3, initial_delay: 1s, max_delay: 1s, jitter: 0}}
      - {name: b, handler: k.b, queue_type: classic, retry: {max_attempts: 2, initial_delay: 1s, max_delay: 1s, jitter: 0}}
`

// agreeCases are the cases' handlers, as a test file writes them.
var agreeCases = []struct{ name, handlers string }{
	{"every step returns", "{}"},
	{"the second step fails for good", "{k.b: {fatal: the order is unknown}}"},
	{"the first step fails twice, then returns", "{k.a: [{fail: {times: 2, error: busy}}, echo]}"},
	{"the first step keeps failing", "{k.a: {fail: {times: 5, error: down}}}"},
	{"the first step stops the run", "{k.a: stop}"},
	{"the second step returns another payload", "{k.b: {return: {total: 2}}}"},
}

// agreeError is a handler's failure as the case gives it: fatal or not,
// its text as written.
type agreeError struct {
	msg   string
	fatal bool
}

func (e agreeError) Error() string        { return e.msg }
func (e agreeError) Is(target error) bool { return e.fatal && target == decide.ErrFatal }

func TestEngineAndHarnessAgree(t *testing.T) {
	url := testenv.VHost(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.yaml"), []byte(agreeFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	text.WriteString("version: acemq.flowtest/v1\ncases:\n")
	for _, c := range agreeCases {
		fmt.Fprintf(&text, "  - name: %s\n    handlers: %s\n    steps: [{send: {pipeline: p, payload: {total: 1}, reply_to: agree.replies}}, {run: until_idle}]\n", c.name, c.handlers)
	}
	file, ds := flowtest.Parse(filepath.Join(dir, "agree.flowtest.yaml"), []byte(text.String()))
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	pl, ds := flowtest.LoadPlan(file)
	if pl == nil {
		t.Fatal(ds)
	}

	// The engine's handlers play the outcomes of the case at hand.
	var mu sync.Mutex
	var current *flowtest.Case
	var route []string
	handler := func(name string) runtime.HandlerFunc {
		return func(_ context.Context, req runtime.Request) (decide.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			o := flowtest.Outcome{}
			if h := current.Handlers[name]; h != nil && len(h.Outcomes) > 0 {
				o = h.Outcomes[min(max(req.Envelope.Attempt, 1)-1, len(h.Outcomes)-1)]
			}
			step := strings.TrimPrefix(req.Queue, "p.")
			switch {
			case o.Fatal != "":
				return decide.Result{}, agreeError{o.Fatal, true}
			case o.Fail != "":
				return decide.Result{}, agreeError{o.Fail, false}
			case o.Stop:
				route = append(route, step)
				return decide.Result{Stop: true}, nil
			case o.Return != nil:
				route = append(route, step)
				return decide.Result{Payload: o.Return}, nil
			}
			route = append(route, step)
			return decide.Result{Payload: req.Payload}, nil
		}
	}
	rt := runtimetest.Run(t, url, pl, runtime.Options{Handlers: map[string]runtime.HandlerFunc{"k.a": handler("k.a"), "k.b": handler("k.b")}})
	ch := testenv.ConfirmedChannel(t, url)
	if _, err := ch.QueueDeclare("agree.replies", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	retried := map[string]int64{}

	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			mu.Lock()
			current, route = c, nil
			mu.Unlock()
			m, err := decide.FirstMessage(pl, decide.Target{Pipeline: "p"}, []byte(`{"total":1}`), time.Now())
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
			var exp strings.Builder
			mu.Lock()
			fmt.Fprintf(&exp, "route: %s\n", yamlList(route))
			mu.Unlock()
			fmt.Fprintf(&exp, "replies: [{outcome: %q", decide.HeaderText(reply.Headers[plan.HeaderOutcome]))
			if v, ok := reply.Headers[plan.HeaderStoppedAt]; ok {
				fmt.Fprintf(&exp, ", stopped_at: %q", decide.HeaderText(v))
			}
			if len(reply.Body) > 0 {
				fmt.Fprintf(&exp, ", payload: %s", reply.Body)
			} else {
				exp.WriteString(", payload: null")
			}
			exp.WriteString("}]\ndead_letters: [")
			n := 0
			for _, q := range []string{"p.a.dlq", "p.b.dlq"} {
				for {
					d, ok, err := ch.Get(q, true)
					if err != nil {
						t.Fatal(err)
					}
					if !ok {
						break
					}
					if n > 0 {
						exp.WriteString(", ")
					}
					n++
					attempt, _ := decide.HeaderInt(d.Headers[plan.HeaderAttempt])
					fmt.Fprintf(&exp, "{queue: %s, kind: %q, error: %q, attempt: %d, payload: %s}", q,
						decide.HeaderText(d.Headers[plan.HeaderErrorKind]), decide.HeaderText(d.Headers[plan.HeaderError]), attempt, d.Body)
				}
			}
			exp.WriteString("]\nretries: [")
			n = 0
			for _, id := range []string{"p.a", "p.b"} {
				st, err := rt.Consumer(t.Context(), id)
				if err != nil {
					t.Fatal(err)
				}
				for range st.Counters[decide.OutcomeRetried] - retried[id] {
					if n > 0 {
						exp.WriteString(", ")
					}
					n++
					fmt.Fprintf(&exp, "{queue: %s}", id)
				}
				retried[id] = st.Counters[decide.OutcomeRetried]
			}
			exp.WriteString("]\n")

			// The engine's observations, as the case's expectations.
			caseText := fmt.Sprintf("version: acemq.flowtest/v1\ncases:\n  - name: x\n    handlers: %s\n    steps: [{send: {pipeline: p, payload: {total: 1}, reply_to: agree.replies}}, {run: until_idle}]\n    expect:\n%s",
				handlersOf(c.Name), indent(exp.String(), "      "))
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

func handlersOf(name string) string {
	for _, c := range agreeCases {
		if c.name == name {
			return c.handlers
		}
	}
	return "{}"
}

func yamlList(xs []string) string { return "[" + strings.Join(xs, ", ") + "]" }

func indent(s, by string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return by + strings.Join(lines, "\n"+by) + "\n"
}

// publish sends m as decide built it, confirmed.
func publish(t *testing.T, ch *amqp.Channel, m decide.Message) {
	t.Helper()
	h := amqp.Table{}
	for k, v := range m.Headers {
		h[k] = v
	}
	conf, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), m.Exchange, m.RoutingKey, true, false, amqp.Publishing{
		MessageId: m.MessageID, CorrelationId: m.CorrelationID, ReplyTo: m.ReplyTo, Type: m.Type, ContentType: m.ContentType,
		DeliveryMode: m.DeliveryMode, Timestamp: m.Timestamp, Headers: h, Body: m.Body})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(t.Context()); err != nil || !ok {
		t.Fatalf("publish to %s %s: confirmed %v, %v", m.Exchange, m.RoutingKey, ok, err)
	}
}
