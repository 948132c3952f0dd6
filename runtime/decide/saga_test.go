package decide

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/testenv"
)

const sagaFlow = `version: acemq.flow/v1
name: shop
types:
  Order: {type: object, required: [id], properties: {id: {type: string}, items: {type: array}}}
plugins:
  p: {command: ./p}
sagas:
  - name: place-order
    input: Order
    steps:
      - {name: take-payment,  handler: p.charge,  compensate: p.refund}
      - {name: reserve-stock, handler: p.reserve, compensate: p.release, when: "len(payload.items) > 0"}
      - {name: book-courier,  handler: p.book}
  - name: email-first
    steps:
      - {name: send-email,   handler: p.email}
      - {name: take-payment, handler: p.charge, compensate: p.refund}
      - {name: book-courier, handler: p.book}
  - name: gift
    steps:
      - {name: wrap,  handler: p.wrap, compensate: p.unwrap, when: "payload.wrap == true"}
      - {name: ship,  handler: p.ship}
  - name: broken-when
    steps:
      - {name: charge, handler: p.charge, compensate: p.refund}
      - {name: check,  handler: p.check, when: "payload.items[5] > 0"}
`

func sagaPlan(t *testing.T) *plan.Plan {
	t.Helper()
	set, err := spec.Load(testenv.FlowFS(sagaFlow), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sagaOf(t *testing.T, p *plan.Plan, name string) *plan.Saga {
	t.Helper()
	for i := range p.Sagas {
		if p.Sagas[i].Name == name {
			return &p.Sagas[i]
		}
	}
	t.Fatalf("no saga %q in the plan", name)
	return nil
}

// sagaConsumer is the consumer of step's queue, or of its compensation's.
func sagaConsumer(saga, step string, compensation bool) *plan.Consumer {
	q := plan.SagaStepQueue(saga, step)
	if compensation {
		q = plan.CompensateQueue(saga, step)
	}
	return &plan.Consumer{ID: q, Kind: plan.KindSagaStep, Flow: "shop", Queue: q, Step: step}
}

// sent names what a transition publishes: `<key>` for a step or
// compensation message, `reply:<outcome>` for the reply, `dlq:<queue>`.
func sent(tr SagaTransition) []string {
	var out []string
	for _, p := range tr.Publish {
		switch {
		case p.Headers[plan.HeaderOutcome] != nil:
			out = append(out, fmt.Sprint("reply:", p.Headers[plan.HeaderOutcome]))
		case p.Exchange == "" && strings.HasSuffix(p.RoutingKey, ".dlq"):
			out = append(out, "dlq:"+p.RoutingKey)
		default:
			out = append(out, p.RoutingKey)
		}
	}
	return out
}

func stepStates(inst SagaInstance) []string {
	var out []string
	for _, st := range inst.Steps {
		out = append(out, st.State)
	}
	return out
}

// TestSagaTransitions drives instances through sequences of events, each
// as the engine would: start, then for every message sent, the outcome of
// its handler.
func TestSagaTransitions(t *testing.T) {
	p := sagaPlan(t)
	cases := []struct {
		name   string
		saga   string
		input  string
		events []string // done, fail, undone, undo-fail, timeout: of the message the instance waits for
		sent   []string // what each event sent, in order; the start's first
		state  string
		steps  []string
	}{
		{"the happy path runs each step after the one before and replies completed", "place-order", `{"id":"o-1","items":[1]}`,
			[]string{"done", "done", "done"},
			[]string{"(run here)", "reserve-stock", "book-courier", "reply:completed"},
			SagaCompleted, []string{"completed", "completed", "completed"}},
		{"a step whose when is false is skipped", "place-order", `{"id":"o-1","items":[]}`,
			[]string{"done", "done"},
			[]string{"(run here)", "book-courier", "reply:completed"},
			SagaCompleted, []string{"completed", "skipped", "completed"}},
		{"a fatal third step compensates the completed steps in reverse, one at a time", "place-order", `{"id":"o-1","items":[1]}`,
			[]string{"done", "done", "fail", "undone", "undone"},
			[]string{"(run here)", "reserve-stock", "book-courier", "reserve-stock.compensate", "take-payment.compensate", "reply:compensated"},
			SagaCompensated, []string{"compensated", "compensated", "failed"}},
		{"a compensation that fails for good is recorded, the rest still run, and the instance is unresolved", "place-order", `{"id":"o-1","items":[1]}`,
			[]string{"done", "done", "fail", "undo-fail", "undone"},
			[]string{"(run here)", "reserve-stock", "book-courier", "reserve-stock.compensate", "take-payment.compensate", "reply:unresolved"},
			SagaUnresolved, []string{"compensated", "compensation_failed", "failed"}},
		{"a skipped step is never compensated", "place-order", `{"id":"o-1","items":[]}`,
			[]string{"done", "fail", "undone"},
			[]string{"(run here)", "book-courier", "take-payment.compensate", "reply:compensated"},
			SagaCompensated, []string{"compensated", "skipped", "failed"}},
		{"the saga's timeout fails the running step for good and compensates what was done", "place-order", `{"id":"o-1","items":[1]}`,
			[]string{"done", "timeout", "undone"},
			[]string{"(run here)", "reserve-stock", "take-payment.compensate", "reply:compensated"},
			SagaCompensated, []string{"compensated", "failed", "pending"}},
		{"a first step that fails for good leaves nothing to compensate", "place-order", `{"id":"o-1","items":[1]}`,
			[]string{"fail"},
			[]string{"(run here)", "reply:compensated"},
			SagaCompensated, []string{"failed", "pending", "pending"}},
		{"a completed step without a compensate handler is not undone: unresolved", "email-first", `{"id":"o-1"}`,
			[]string{"done", "done", "fail", "undone"},
			[]string{"(run here)", "take-payment", "book-courier", "take-payment.compensate", "reply:unresolved"},
			SagaUnresolved, []string{"completed", "compensated", "failed"}},
		{"a first step whose when is false is skipped at the start, which sends the next step's message", "gift", `{"wrap":false}`,
			[]string{"done"},
			[]string{"ship", "reply:completed"},
			SagaCompleted, []string{"skipped", "completed"}},
		{"a when that cannot be evaluated fails its step for good", "broken-when", `{"items":[1]}`,
			[]string{"done", "undone"},
			[]string{"(run here)", "charge.compensate", "reply:compensated"},
			SagaCompensated, []string{"compensated", "failed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := sagaOf(t, p, tc.saga)
			first := sagaConsumer(s.Name, s.Steps[0].Name, false)
			start := InboundOf(Message{MessageID: "m-1", CorrelationID: "c-1", ReplyTo: "amq.rabbitmq.reply-to.x", Body: []byte(tc.input)})
			tr := SagaStart(s, first, start, now)
			if !tr.Write || tr.Outcome != OutcomeAcknowledged {
				t.Fatalf("SagaStart = %+v, want the instance written and the start acknowledged", tr)
			}
			var got []string
			if tr.Run {
				got = append(got, "(run here)")
			}
			got = append(got, sent(tr)...)
			inst := tr.Instance
			if inst.ID != "m-1" || inst.CorrelationID != "c-1" || inst.ReplyTo != "amq.rabbitmq.reply-to.x" || string(inst.Input) != tc.input {
				t.Fatalf("SagaStart instance = %+v, want id m-1, correlation c-1, the reply_to and the input", inst)
			}
			for n, ev := range tc.events {
				at := now.Add(time.Duration(n+1) * time.Second)
				// The engine accepts the delivery first.
				if ev != "timeout" {
					c := sagaConsumer(s.Name, inst.Steps[inst.Step].Name, inst.State == SagaCompensating)
					msg := Message{MessageID: fmt.Sprintf("d-%d", n), Headers: Table{plan.HeaderSagaID: inst.ID}}
					if a := SagaAccept(s, c, &inst, InboundOf(msg), at); a != nil {
						t.Fatalf("event %d (%s): SagaAccept on %s = %+v, want the handler to run", n, ev, c.Queue, a)
					}
				}
				switch ev {
				case "done":
					if inst.State == SagaCompensating {
						tr = SagaCompensationDone(s, inst, 1, "d", at)
					} else {
						tr = SagaStepSucceeded(s, inst, []byte(`{"step":"`+inst.Steps[inst.Step].Name+`"}`), 1, "d", at)
					}
				case "undone":
					tr = SagaCompensationDone(s, inst, 1, "d", at)
				case "fail":
					tr = SagaStepFailedForGood(s, inst, 3, "no van free", "d", at)
				case "undo-fail":
					tr = SagaCompensationFailed(s, inst, 5, "the warehouse is closed", "d", at)
				case "timeout":
					tr = SagaTimedOut(s, inst, time.Hour, "timer", at)
				}
				if !tr.Write || tr.Outcome != OutcomeAcknowledged {
					t.Fatalf("event %d (%s) = %+v, want a write, acknowledged", n, ev, tr)
				}
				got = append(got, sent(tr)...)
				inst = tr.Instance
			}
			if !slices.Equal(got, tc.sent) {
				t.Errorf("sent %v, want %v", got, tc.sent)
			}
			if inst.State != tc.state || !slices.Equal(stepStates(inst), tc.steps) {
				t.Errorf("final instance %s %v, want %s %v", inst.State, stepStates(inst), tc.state, tc.steps)
			}
			if inst.Ended() != !inst.EndedAt.IsZero() {
				t.Errorf("instance %s has end time %v", inst.State, inst.EndedAt)
			}
		})
	}
}

func TestSagaRecordsEachStepsOutcome(t *testing.T) {
	p := sagaPlan(t)
	s := sagaOf(t, p, "place-order")
	start := InboundOf(Message{MessageID: "m-1", Body: []byte(`{"id":"o-1","items":[1]}`)})
	inst := SagaStart(s, sagaConsumer(s.Name, "take-payment", false), start, now).Instance
	t1, t2, t3 := now.Add(time.Second), now.Add(2*time.Second), now.Add(3*time.Second)
	inst = SagaStepSucceeded(s, inst, []byte(`{"payment":"p-1"}`), 2, "d-1", t1).Instance
	inst = SagaStepFailedForGood(s, inst, 5, "attempt 5 of 5 failed: out of stock", "d-2", t2).Instance
	inst = SagaCompensationDone(s, inst, 1, "d-3", t3).Instance
	pay, stock := inst.Steps[0], inst.Steps[1]
	if pay.State != SagaStepCompensated || string(pay.Output) != `{"payment":"p-1"}` || pay.Attempts != 2 || !pay.CompletedAt.Equal(t1) || !pay.CompensatedAt.Equal(t3) {
		t.Errorf("take-payment recorded %+v, want compensated, its output, 2 attempts, completed %s, compensated %s", pay, t1, t3)
	}
	if stock.State != SagaStepFailed || stock.Attempts != 5 || stock.Error != "attempt 5 of 5 failed: out of stock" {
		t.Errorf("reserve-stock recorded %+v, want failed after 5 attempts with its error", stock)
	}
	if inst.State != SagaCompensated || !inst.EndedAt.Equal(t3) {
		t.Errorf("instance %s ended %s, want compensated at %s", inst.State, inst.EndedAt, t3)
	}
}

func TestSagaMessages(t *testing.T) {
	p := sagaPlan(t)
	s := sagaOf(t, p, "place-order")
	input := `{"id":"o-1","items":[1]}`
	start := InboundOf(Message{MessageID: "m-1", CorrelationID: "c-1", Body: []byte(input)})
	inst := SagaStart(s, sagaConsumer(s.Name, "take-payment", false), start, now).Instance
	tr := SagaStepSucceeded(s, inst, []byte(`{"payment":"p-1"}`), 1, "d-1", now)
	if len(tr.Publish) != 1 {
		t.Fatalf("SagaStepSucceeded published %d messages, want 1", len(tr.Publish))
	}
	m := tr.Publish[0].Message
	if m.Exchange != plan.SagaExchange("place-order") || m.RoutingKey != "reserve-stock" || string(m.Body) != input || tr.Publish[0].BestEffort {
		t.Errorf("the next step's message = %s/%s %q best effort %v; want place-order/reserve-stock with the saga's input, confirmed", m.Exchange, m.RoutingKey, m.Body, tr.Publish[0].BestEffort)
	}
	if m.CorrelationID != "c-1" || m.ReplyTo != "" || m.DeliveryMode != Persistent {
		t.Errorf("the next step's message: correlation %q, reply_to %q, delivery mode %d; want c-1, none (the instance replies), persistent", m.CorrelationID, m.ReplyTo, m.DeliveryMode)
	}
	h := m.Headers
	if h[plan.HeaderSagaID] != "m-1" || h[plan.HeaderSaga] != "place-order" || h[plan.HeaderSagaStep] != "reserve-stock" || h[plan.HeaderCausationID] != "d-1" || h[plan.HeaderAttempt] != int64(1) {
		t.Errorf("the next step's headers = %v, want the saga, instance m-1, step reserve-stock, cause d-1, attempt 1", h)
	}
	// The same transition again (a redelivery after a crash between the
	// write and the acknowledgement) sends the same message id.
	again := SagaStepSucceeded(s, inst, []byte(`{"payment":"p-1"}`), 1, "d-1", now.Add(time.Minute))
	if again.Publish[0].MessageID != m.MessageID || m.MessageID == "" {
		t.Errorf("the next step's message id = %q, then %q on the same transition; want one id, derived from the instance and the queue", m.MessageID, again.Publish[0].MessageID)
	}
	comp := SagaStepFailedForGood(s, tr.Instance, 1, "x", "d-2", now).Publish[0].Message
	if comp.RoutingKey != plan.CompensateKey("take-payment") || comp.MessageID == m.MessageID || comp.Headers[plan.HeaderSagaStep] != "take-payment" {
		t.Errorf("the compensation's message: key %q id %q step %v; want take-payment.compensate, its own id, step take-payment", comp.RoutingKey, comp.MessageID, comp.Headers[plan.HeaderSagaStep])
	}
	if got := SagaStart(s, sagaConsumer(s.Name, "take-payment", false), start, now); got.Instance.Steps[0].State != SagaStepPending || !got.Run {
		t.Errorf("SagaStart on the first step's queue = run %v step %s, want the handler to run here on a pending step", got.Run, got.Instance.Steps[0].State)
	}
	// A publisher that is not ours starting the saga on another step's
	// queue: the first step's message is sent, nothing runs here.
	elsewhere := SagaStart(s, sagaConsumer(s.Name, "book-courier", false), start, now)
	if elsewhere.Run || !slices.Equal(sent(elsewhere), []string{"take-payment"}) {
		t.Errorf("SagaStart on book-courier's queue = run %v, sent %v; want take-payment's message sent", elsewhere.Run, sent(elsewhere))
	}
}

func TestSagaStartRefusesAnInvalidInput(t *testing.T) {
	p := sagaPlan(t)
	s := sagaOf(t, p, "place-order")
	c := sagaConsumer(s.Name, "take-payment", false)
	for _, body := range []string{`{"items":[1]}`, `not json`} {
		tr := SagaStart(s, c, InboundOf(Message{MessageID: "m-1", ReplyTo: "q", Body: []byte(body)}), now)
		if tr.Write || tr.Run || tr.Outcome != OutcomeDeadLettered || !slices.Equal(sent(tr), []string{"dlq:place-order.take-payment.dlq", "reply:dead-lettered"}) {
			t.Errorf("SagaStart(%s) = write %v run %v %s sent %v; want no instance, dead-lettered to the queue's .dlq and the requester told", body, tr.Write, tr.Run, tr.Outcome, sent(tr))
		}
	}
}

func TestSagaAccept(t *testing.T) {
	p := sagaPlan(t)
	s := sagaOf(t, p, "place-order")
	start := InboundOf(Message{MessageID: "m-1", ReplyTo: "reply-q", Body: []byte(`{"id":"o-1","items":[1]}`)})
	running := SagaStart(s, sagaConsumer(s.Name, "take-payment", false), start, now).Instance
	atStock := SagaStepSucceeded(s, running, nil, 1, "d", now).Instance
	compensating := SagaStepFailedForGood(s, atStock, 1, "x", "d", now).Instance
	done := SagaCompensationDone(s, compensating, 1, "d", now).Instance
	other := running
	other.Saga = "email-first"
	msg := func(id string) Inbound {
		return InboundOf(Message{MessageID: "d-9", Headers: Table{plan.HeaderSagaID: id}, Body: []byte(`{}`)})
	}
	atCourier := SagaStepSucceeded(s, atStock, nil, 1, "d", now).Instance
	cases := []struct {
		name    string
		c       *plan.Consumer
		inst    *SagaInstance
		outcome string // "" for run
		reason  string
		resend  []string // what a duplicate sends again
	}{
		{"the running step's message runs", sagaConsumer(s.Name, "take-payment", false), &running, "", "", nil},
		{"a step's message redelivered after its write is a duplicate that sends the next step's message again", sagaConsumer(s.Name, "take-payment", false), &atStock, OutcomeDuplicate, "sent again", []string{"reserve-stock"}},
		{"a step's message two steps behind is a duplicate that sends nothing", sagaConsumer(s.Name, "take-payment", false), &atCourier, OutcomeDuplicate, "handled before", nil},
		{"a later step's message before its turn is a duplicate that sends nothing", sagaConsumer(s.Name, "book-courier", false), &atStock, OutcomeDuplicate, "handled before", nil},
		{"a failed step's message redelivered is a duplicate that sends the first compensation again", sagaConsumer(s.Name, "reserve-stock", false), &compensating, OutcomeDuplicate, "compensating", []string{"take-payment.compensate"}},
		{"the compensation the instance waits for runs", sagaConsumer(s.Name, "take-payment", true), &compensating, "", "", nil},
		{"the last compensation redelivered after its write is a duplicate that sends the reply again", sagaConsumer(s.Name, "take-payment", true), &done, OutcomeDuplicate, "compensated", []string{"reply:compensated"}},
		{"a compensation while the instance runs is a duplicate that sends nothing", sagaConsumer(s.Name, "take-payment", true), &running, OutcomeDuplicate, "running", nil},
		{"a message for no instance is dead-lettered with that reason", sagaConsumer(s.Name, "take-payment", false), nil, OutcomeDeadLettered, `no instance "m-1" in the store`, nil},
		{"a message for another saga's instance is dead-lettered", sagaConsumer(s.Name, "take-payment", false), &other, OutcomeDeadLettered, `belongs to saga "email-first"`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := SagaAccept(s, tc.c, tc.inst, msg("m-1"), now)
			if tc.outcome == "" {
				if got != nil {
					t.Fatalf("SagaAccept = %+v, want nil (run the handler)", got)
				}
				return
			}
			if got == nil || got.Outcome != tc.outcome || got.Write || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("SagaAccept = %+v, want %s, nothing written, the reason saying %q", got, tc.outcome, tc.reason)
			}
			if tc.outcome == OutcomeDuplicate {
				if d := sent(*got); !slices.Equal(d, tc.resend) {
					t.Errorf("a duplicate sent %v, want %v", d, tc.resend)
				}
				// What it sends again is what the write sent: the same id.
				for _, p := range got.Publish {
					if id := HeaderText(p.Headers[plan.HeaderSagaStep]); id != "" && p.MessageID != DerivedMessageID(plan.SagaExchange(s.Name)+"."+p.RoutingKey, "m-1") {
						t.Errorf("the message sent again has id %q, not the one derived for %s", p.MessageID, p.RoutingKey)
					}
				}
			}
			if tc.outcome == OutcomeDeadLettered {
				if d := sent(*got); !slices.Equal(d, []string{"dlq:" + plan.DeadLetterQueue(tc.c.Queue)}) {
					t.Errorf("dead-letter published %v, want the queue's .dlq", d)
				}
				if h := got.Publish[0].Headers; h[plan.HeaderErrorKind] != KindFatal || !strings.Contains(fmt.Sprint(h[plan.HeaderError]), tc.reason) {
					t.Errorf("dead-letter headers %v, want fatal with the reason", h)
				}
			}
		})
	}
	if id, start := SagaInstanceID(msg("m-7")); id != "m-7" || start {
		t.Errorf("SagaInstanceID of a step's message = %q, %v; want its saga id header", id, start)
	}
	if id, start := SagaInstanceID(InboundOf(Message{MessageID: "m-8"})); id != "m-8" || !start {
		t.Errorf("SagaInstanceID of a message without the header = %q, %v; want its own id, a start", id, start)
	}
}

func TestSagaTimeoutOfACompensatingOrEndedInstanceWritesNothing(t *testing.T) {
	p := sagaPlan(t)
	s := sagaOf(t, p, "place-order")
	start := InboundOf(Message{MessageID: "m-1", Body: []byte(`{"id":"o-1","items":[1]}`)})
	inst := SagaStart(s, sagaConsumer(s.Name, "take-payment", false), start, now).Instance
	inst = SagaStepSucceeded(s, inst, nil, 1, "d", now).Instance
	inst = SagaStepFailedForGood(s, inst, 1, "x", "d", now).Instance
	// Compensating, it sends again, with the same id, the compensation it
	// waits for (in case its cause's publish was lost; a duplicate
	// otherwise); ended, it sends nothing.
	for _, tc := range []struct {
		inst SagaInstance
		want []string
	}{{inst, []string{"take-payment.compensate"}}, {SagaCompensationDone(s, inst, 1, "d", now).Instance, nil}} {
		if tr := SagaTimedOut(s, tc.inst, time.Hour, "timer", now); tr.Write || tr.Outcome != OutcomeDuplicate || !slices.Equal(sent(tr), tc.want) {
			t.Errorf("SagaTimedOut of a %s instance = %+v, want a duplicate that writes nothing and sends %v", tc.inst.State, tr, tc.want)
		}
	}
}

func TestSagaReplyAndSummary(t *testing.T) {
	p := sagaPlan(t)
	s := sagaOf(t, p, "place-order")
	start := InboundOf(Message{MessageID: "m-1", CorrelationID: "c-1", ReplyTo: "amq.rabbitmq.reply-to.abc", Body: []byte(`{"id":"o-1","items":[1]}`)})
	t0 := time.Date(2026, 9, 9, 14, 3, 11, 0, time.FixedZone("CEST", 2*3600))
	inst := SagaStart(s, sagaConsumer(s.Name, "take-payment", false), start, t0).Instance
	inst = SagaStepSucceeded(s, inst, []byte(`{}`), 1, "d-1", t0.Add(time.Second)).Instance
	inst = SagaStepSucceeded(s, inst, []byte(`{}`), 2, "d-2", t0.Add(2*time.Second)).Instance
	inst = SagaStepFailedForGood(s, inst, 8, "no van free", "d-3", t0.Add(3*time.Second)).Instance
	inst = SagaCompensationFailed(s, inst, 5, "the warehouse is closed", "d-4", t0.Add(4*time.Second)).Instance
	tr := SagaCompensationDone(s, inst, 1, "d-5", t0.Add(5*time.Second))
	if len(tr.Publish) != 1 {
		t.Fatalf("the last compensation published %v, want the reply alone", sent(tr))
	}
	r := tr.Publish[0]
	if !r.BestEffort || !r.NotMandatory || r.Exchange != "" || r.RoutingKey != "amq.rabbitmq.reply-to.abc" || r.CorrelationID != "c-1" ||
		r.Headers[plan.HeaderOutcome] != "unresolved" || r.Headers[plan.HeaderCausationID] != "d-5" {
		t.Errorf("reply = %+v, want a best-effort reply to the direct reply-to with correlation c-1, x-acemq-outcome unresolved, caused by d-5", r)
	}
	want := `{"saga":"place-order","id":"m-1","state":"unresolved","started_at":"2026-09-09T12:03:11Z","ended_at":"2026-09-09T12:03:16Z",` +
		`"steps":[{"name":"take-payment","state":"compensated","attempts":1,"completed_at":"2026-09-09T12:03:12Z","compensated_at":"2026-09-09T12:03:16Z"},` +
		`{"name":"reserve-stock","state":"compensation_failed","attempts":5,"completed_at":"2026-09-09T12:03:13Z","error":"compensation: the warehouse is closed"},` +
		`{"name":"book-courier","state":"failed","attempts":8,"error":"no van free"}],` +
		`"not_undone":["reserve-stock"]}`
	if string(r.Body) != want {
		t.Errorf("reply body =\n%s\nwant\n%s", r.Body, want)
	}
	var back SagaSummary
	if err := json.Unmarshal(r.Body, &back); err != nil || back.State != SagaUnresolved || len(back.Steps) != 3 {
		t.Errorf("the summary does not read back: %+v, %v", back, err)
	}
	running := SummaryOf(SagaStart(s, sagaConsumer(s.Name, "take-payment", false), start, t0).Instance)
	b, _ := json.Marshal(running)
	if strings.Contains(string(b), "ended_at") || strings.Contains(string(b), "not_undone") || !strings.Contains(string(b), `"state":"pending","attempts":0`) {
		t.Errorf("a running instance's summary = %s, want no ended_at and no not_undone, its steps pending", b)
	}
}

// TestSagaStartRedeliveredWithItsFirstStepSkippedSendsAgain: the starting
// message of a saga whose first step is skipped, delivered again after its
// create (a crash before the publish), is the message whose handling sent
// the first step to run: a duplicate that sends it again, with the same
// id, so that the instance does not wait for ever.
func TestSagaStartRedeliveredWithItsFirstStepSkippedSendsAgain(t *testing.T) {
	p := sagaPlan(t)
	gift := sagaOf(t, p, "gift")
	start := InboundOf(Message{MessageID: "m-1", Body: []byte(`{"wrap":false}`)})
	created := SagaStart(gift, sagaConsumer(gift.Name, "wrap", false), start, now)
	if created.Run || !slices.Equal(sent(created), []string{"ship"}) {
		t.Fatalf("SagaStart(gift, wrap false) = run %v, sent %v; want ship's message sent", created.Run, sent(created))
	}
	again := SagaAccept(gift, sagaConsumer(gift.Name, "wrap", false), &created.Instance, start, now)
	if again == nil || again.Outcome != OutcomeDuplicate || !slices.Equal(sent(*again), []string{"ship"}) || again.Publish[0].MessageID != created.Publish[0].MessageID {
		t.Errorf("SagaAccept(the starting message again) = %+v; want a duplicate sending ship's message again, with the same id", again)
	}
	// Every step skipped: the instance completed at once, and the reply is
	// sent again.
	allSkipped := InboundOf(Message{MessageID: "m-2", ReplyTo: "q", Body: []byte(`{"wrap":false}`)})
	noop := *gift
	noop.Steps = noop.Steps[:1]
	done := SagaStart(&noop, sagaConsumer(gift.Name, "wrap", false), allSkipped, now)
	if again := SagaAccept(&noop, sagaConsumer(gift.Name, "wrap", false), &done.Instance, allSkipped, now); done.Instance.State != SagaCompleted ||
		again == nil || !slices.Equal(sent(*again), []string{"reply:completed"}) {
		t.Errorf("a saga all of whose steps are skipped: %s, then its starting message again sends %v; want completed, the reply sent again", done.Instance.State, again)
	}
}

// TestSagaTimeoutRedeliveredAfterItsWriteSendsAgain: the timeout delivered
// again after its write (a crash before the publish) sends again what its
// handling sent: the first compensation, or the reply when there was
// nothing to compensate.
func TestSagaTimeoutRedeliveredAfterItsWriteSendsAgain(t *testing.T) {
	p := sagaPlan(t)
	s := sagaOf(t, p, "place-order")
	start := InboundOf(Message{MessageID: "m-1", ReplyTo: "q", Body: []byte(`{"id":"o-1","items":[1]}`)})
	running := SagaStart(s, sagaConsumer(s.Name, "take-payment", false), start, now).Instance
	atStock := SagaStepSucceeded(s, running, nil, 1, "d", now).Instance
	for _, tc := range []struct {
		name string
		inst SagaInstance
		want []string
	}{
		{"at the second step: take-payment's compensation", atStock, []string{"take-payment.compensate"}},
		{"at the first step: nothing to compensate, the reply", running, []string{"reply:compensated"}},
	} {
		first := SagaTimedOut(s, tc.inst, time.Hour, "timer", now)
		again := SagaTimedOut(s, first.Instance, time.Hour, "timer", now)
		if !first.Write || !slices.Equal(sent(first), tc.want) || again.Write || again.Outcome != OutcomeDuplicate || !slices.Equal(sent(again), tc.want) {
			t.Errorf("%s: the timeout sent %v, again %v (%s, write %v); want %v both times, the second a duplicate writing nothing", tc.name, sent(first), sent(again), again.Outcome, again.Write, tc.want)
		}
		if len(first.Publish) > 0 && !first.Publish[0].BestEffort && first.Publish[0].MessageID != again.Publish[0].MessageID {
			t.Errorf("%s: sent again with id %s, want %s", tc.name, again.Publish[0].MessageID, first.Publish[0].MessageID)
		}
	}
}

// TestSagaInstanceOfChangedStepsIsDeadLettered: an instance started before
// the saga's steps changed (one added here) is not moved on by the saga as
// it is now, which would read its steps by the wrong positions: its step's
// message and its timeout are dead-lettered naming both lists of steps.
func TestSagaInstanceOfChangedStepsIsDeadLettered(t *testing.T) {
	p := sagaPlan(t)
	s := sagaOf(t, p, "place-order")
	start := InboundOf(Message{MessageID: "m-1", Body: []byte(`{"id":"o-1","items":[1]}`)})
	inst := SagaStart(s, sagaConsumer(s.Name, "take-payment", false), start, now).Instance
	inst.Steps = inst.Steps[:2] // started when the saga had two steps
	msg := InboundOf(Message{MessageID: "d-1", Headers: Table{plan.HeaderSagaID: "m-1"}, Body: []byte(`{"id":"o-1","items":[1]}`)})
	want := "was started with the steps [take-payment reserve-stock], and the saga now has [take-payment reserve-stock book-courier]"
	if got := SagaAccept(s, sagaConsumer(s.Name, "take-payment", false), &inst, msg, now); got == nil || got.Outcome != OutcomeDeadLettered || !strings.Contains(got.Reason, want) {
		t.Errorf("SagaAccept(an instance of changed steps) = %+v, want dead-lettered saying %q", got, want)
	}
	if got := SagaTimeoutArrived(s, sagaConsumer(s.Name, "take-payment", false), &inst, msg, now); got.Outcome != OutcomeDeadLettered || got.Write || !strings.Contains(got.Reason, want) {
		t.Errorf("SagaTimeoutArrived(an instance of changed steps) = %+v, want dead-lettered, nothing written", got)
	}
}
