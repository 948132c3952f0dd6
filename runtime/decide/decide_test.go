package decide

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/testenv"
)

var now = time.Date(2026, 9, 9, 14, 3, 11, 0, time.UTC)

func stepConsumer(step string, pos int) *plan.Consumer {
	return &plan.Consumer{
		ID: plan.StepConsumerID("fulfilment", step), Kind: plan.KindStep, Flow: "shop", Queue: plan.StepQueue("fulfilment", step),
		Pipeline: "fulfilment", Step: step, Position: pos,
		Retry: plan.Retry{MaxAttempts: 3, Jitter: 0.5, Rungs: []plan.Rung{
			{Attempt: 2, Delay: plan.Duration(2 * time.Second), Queue: plan.RetryQueue(plan.StepQueue("fulfilment", step), 2*time.Second)},
			{Attempt: 3, Delay: plan.Duration(4 * time.Second), Queue: plan.RetryQueue(plan.StepQueue("fulfilment", step), 4*time.Second)},
		}},
	}
}

var route = []string{"validate", "reserve", "dispatch"}

func delivery(headers Table, replyTo string) Inbound {
	return InboundOf(Message{MessageID: "m-1", Headers: headers, ReplyTo: replyTo, Body: []byte(`{"id":"o-1"}`),
		Timestamp: now.Add(-time.Minute)})
}

func TestDecideFollowsTheDeclaredRoute(t *testing.T) {
	cases := []struct {
		name     string
		consumer *plan.Consumer
		headers  Table
		res      Result
		replyTo  string
		outcome  string
		to       string // exchange/key of the first publish, "" for none
		position int64
	}{
		{"a step publishes its result to the next step", stepConsumer("validate", 0),
			Table{plan.HeaderRoute: "validate,reserve,dispatch", plan.HeaderRoutePosition: int64(0)}, Result{Payload: []byte(`{}`)}, "", OutcomeAcknowledged, "fulfilment/reserve", 1},
		{"a message without route headers follows the pipeline from this step on", stepConsumer("reserve", 1),
			nil, Result{Payload: []byte(`{}`)}, "", OutcomeAcknowledged, "fulfilment/dispatch", 2},
		{"route headers of any integer width are read", stepConsumer("validate", 0),
			Table{plan.HeaderRoute: "validate,reserve,dispatch", plan.HeaderRoutePosition: int8(0)}, Result{Payload: []byte(`{}`)}, "", OutcomeAcknowledged, "fulfilment/reserve", 1},
		{"a numeric string position is read", stepConsumer("validate", 0),
			Table{plan.HeaderRoute: "validate,reserve,dispatch", plan.HeaderRoutePosition: "0"}, Result{Payload: []byte(`{}`)}, "", OutcomeAcknowledged, "fulfilment/reserve", 1},
		{"returning nothing before the end stops the run", stepConsumer("validate", 0),
			nil, Result{Stop: true}, "", OutcomeStopped, "", 0},
		{"a stopped run with reply_to replies stopped", stepConsumer("validate", 0),
			nil, Result{Stop: true}, "amq.rabbitmq.reply-to.x", OutcomeStopped, "/amq.rabbitmq.reply-to.x", 0},
		{"the last step completes the run", stepConsumer("dispatch", 2),
			nil, Result{Stop: true}, "", OutcomeAcknowledged, "", 0},
		{"the last step replies completed to reply_to", stepConsumer("dispatch", 2),
			nil, Result{Payload: []byte(`{"done":true}`)}, "client.q", OutcomeAcknowledged, "/client.q", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.consumer, route, delivery(tc.headers, tc.replyTo), tc.res, nil, now, 0)
			if d.Outcome != tc.outcome {
				t.Errorf("outcome %s, want %s (%s)", d.Outcome, tc.outcome, d.Reason)
			}
			if tc.to == "" {
				if len(d.Publish) != 0 {
					t.Errorf("published %d messages, want none", len(d.Publish))
				}
				return
			}
			if len(d.Publish) != 1 {
				t.Fatalf("published %d messages, want 1", len(d.Publish))
			}
			m := d.Publish[0]
			if got := m.Exchange + "/" + m.RoutingKey; got != tc.to {
				t.Errorf("published to %s, want %s", got, tc.to)
			}
			if tc.position > 0 && m.Headers[plan.HeaderRoutePosition] != tc.position {
				t.Errorf("route position %v, want %d", m.Headers[plan.HeaderRoutePosition], tc.position)
			}
		})
	}
}

func TestAStepsOutputIsANewMessageOfTheSameRun(t *testing.T) {
	in := delivery(Table{plan.HeaderFirstSeen: "2026-09-09T14:00:00Z", plan.HeaderOrigin: "shop", plan.HeaderAttempt: int64(3)}, "client.q")
	in.Env.CorrelationID = ""
	d := Decide(stepConsumer("validate", 0), route, in, Result{Payload: []byte(`{"ok":1}`)}, nil, now, 0)
	m := d.Publish[0]
	checks := []struct{ what, got, want string }{
		{"message id is new", fmt.Sprint(m.MessageID != "m-1" && len(m.MessageID) == 36), "true"},
		{"correlation id is the first message's id when none was set", m.CorrelationID, "m-1"},
		{"causation id is the consumed message's id", fmt.Sprint(m.Headers[plan.HeaderCausationID]), "m-1"},
		{"first-seen is carried", fmt.Sprint(m.Headers[plan.HeaderFirstSeen]), "2026-09-09T14:00:00Z"},
		{"origin is carried", fmt.Sprint(m.Headers[plan.HeaderOrigin]), "shop"},
		{"reply_to is carried", m.ReplyTo, "client.q"},
		{"attempt starts again at 1", fmt.Sprint(m.Headers[plan.HeaderAttempt]), "1"},
		{"body is the handler's result", string(m.Body), `{"ok":1}`},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %s, want %s", c.what, c.got, c.want)
		}
	}
}

func TestFailuresClimbTheLadderThenDeadLetter(t *testing.T) {
	c := stepConsumer("reserve", 1)
	cases := []struct {
		name    string
		attempt int64
		err     error
		outcome string
		to      string
		kind    string
	}{
		{"a retryable failure on attempt 1 waits in the first rung", 1, errors.New("stock service down"), OutcomeRetried, "fulfilment.reserve.retry.2s", ""},
		{"attempt 2 waits in the second rung", 2, errors.New("stock service down"), OutcomeRetried, "fulfilment.reserve.retry.4s", ""},
		{"the last attempt is exhausted and dead-lettered", 3, errors.New("stock service down"), OutcomeDeadLettered, "fulfilment.reserve.dlq", KindExhausted},
		{"a fatal failure is dead-lettered on attempt 1", 1, fmt.Errorf("%w: unknown sku", ErrFatal), OutcomeDeadLettered, "fulfilment.reserve.dlq", KindFatal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := delivery(Table{plan.HeaderAttempt: tc.attempt, "x-custom": "kept"}, "")
			d := Decide(c, route, in, Result{}, tc.err, now, 1)
			if d.Outcome != tc.outcome {
				t.Fatalf("outcome %s, want %s", d.Outcome, tc.outcome)
			}
			m := d.Publish[0]
			if m.Exchange != "" || m.RoutingKey != tc.to {
				t.Errorf("published to %q/%q, want the default exchange and %s", m.Exchange, m.RoutingKey, tc.to)
			}
			if m.MessageID != "m-1" || m.Headers["x-custom"] != "kept" || string(m.Body) != `{"id":"o-1"}` {
				t.Errorf("the envelope changed: id %s, headers %v, body %s", m.MessageID, m.Headers, m.Body)
			}
			switch tc.outcome {
			case OutcomeRetried:
				if m.Headers[plan.HeaderAttempt] != tc.attempt+1 {
					t.Errorf("attempt header %v, want %d", m.Headers[plan.HeaderAttempt], tc.attempt+1)
				}
				// jitter 0.5 with a draw of 1 halves the wait.
				rung, _ := c.Retry.RungFor(int(tc.attempt))
				if want := fmt.Sprint(time.Duration(rung.Delay).Milliseconds() / 2); m.Expiration != want {
					t.Errorf("expiration %s ms, want %s", m.Expiration, want)
				}
			case OutcomeDeadLettered:
				for _, h := range []string{plan.HeaderError, plan.HeaderErrorKind, plan.HeaderFailedQueue, plan.HeaderFailedAt} {
					if m.Headers[h] == nil {
						t.Errorf("dead-lettered message lacks %s", h)
					}
				}
				if m.Headers[plan.HeaderErrorKind] != tc.kind || m.Headers[plan.HeaderFailedQueue] != "fulfilment.reserve" {
					t.Errorf("error kind %v, failed queue %v", m.Headers[plan.HeaderErrorKind], m.Headers[plan.HeaderFailedQueue])
				}
				if !strings.Contains(fmt.Sprint(m.Headers[plan.HeaderError]), "stock service down") && tc.kind == KindExhausted {
					t.Errorf("error header %v does not say what failed", m.Headers[plan.HeaderError])
				}
			}
		})
	}
}

func TestACarriedSlipWinsOverTheDeclaredRoute(t *testing.T) {
	slip := Itinerary{}.Then("orders-events", "order.validate", "validate").Then("orders-events", "order.charge", "charge")
	raw, _ := slip.MarshalJSON()
	c := stepConsumer("validate", 0)
	in := delivery(Table{plan.HeaderSlip: string(raw), plan.HeaderRoute: "validate,reserve,dispatch", plan.HeaderRoutePosition: int64(0)}, "")
	d := Decide(c, route, in, Result{Payload: []byte(`{}`)}, nil, now, 0)
	m := d.Publish[0]
	if m.Exchange != "orders-events" || m.RoutingKey != "order.charge" {
		t.Fatalf("published to %s/%s, want the slip's next stop orders-events/order.charge", m.Exchange, m.RoutingKey)
	}
	got, err := ParseItinerary([]byte(m.Headers[plan.HeaderSlip].(string)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Done()) != 1 || got.Done()[0].Name != "validate" || !got.Done()[0].CompletedAt.Equal(now) {
		t.Errorf("done = %+v, want validate completed at %s", got.Done(), now)
	}
	if _, ok := m.Headers[plan.HeaderRoute]; ok {
		t.Error("a slip message also carries a declared route")
	}
}

func TestABrokenSlipOrAnInvalidPayloadIsFatalBeforeTheHandler(t *testing.T) {
	c := stepConsumer("validate", 0)
	in := delivery(Table{plan.HeaderSlip: "{not json"}, "")
	d := Precheck(c, in, now)
	if d == nil || d.Outcome != OutcomeDeadLettered || d.Publish[0].Headers[plan.HeaderErrorKind] != KindFatal {
		t.Fatalf("Precheck of a broken slip = %+v, want fatal dead-letter", d)
	}
	if !errors.Is(in.Env.SlipErr, ErrSlip) {
		t.Errorf("slip error %v is not ErrSlip", in.Env.SlipErr)
	}
	set, err := spec.Load(testenv.FlowFS(`version: acemq.flow/v1
name: shop
types:
  Order: {type: object, required: [id], properties: {id: {type: string}}}
plugins:
  p: {command: ./p}
pipelines:
  - name: fulfilment
    input: Order
    steps:
      - {name: validate, handler: p.validate, output: Order}
`), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	typed := &plan.Consumers[0]
	for _, body := range []string{`{"id": 5}`, `not json`} {
		in := InboundOf(Message{MessageID: "m-2", Body: []byte(body)})
		if d := Precheck(typed, in, now); d == nil || d.Outcome != OutcomeDeadLettered {
			t.Errorf("Precheck(%s) = %+v, want dead-lettered as fatal", body, d)
		}
	}
	in = InboundOf(Message{MessageID: "m-3", Body: []byte(`{"id":"o-1"}`)})
	if d := Precheck(typed, in, now); d != nil {
		t.Errorf("Precheck of a valid order = %+v", d)
	}
	if d := Decide(typed, []string{"validate"}, in, Result{Payload: []byte(`{"id":7}`)}, nil, now, 0); d.Outcome != OutcomeDeadLettered {
		t.Errorf("an output that breaks its type: outcome %s, want dead-lettered", d.Outcome)
	}
}

func TestInProgressKeepsTheEnvelopeAndSpendsNoAttempt(t *testing.T) {
	c := stepConsumer("reserve", 1)
	in := delivery(Table{plan.HeaderAttempt: int64(2)}, "")
	d := InProgress(c, in)
	m := d.Publish[0]
	if d.Outcome != OutcomeInProgress || m.RoutingKey != "fulfilment.reserve.retry.1s" || m.Headers[plan.HeaderAttempt] != int64(2) || m.MessageID != "m-1" {
		t.Errorf("InProgress = %s to %s attempt %v id %s; want in_progress via the 1s rung, attempt 2, same id", d.Outcome, m.RoutingKey, m.Headers[plan.HeaderAttempt], m.MessageID)
	}
}

// A message the broker dead-lettered (a quorum queue's delivery limit) and
// a person replayed carries x-death naming its queue; sent round a retry
// rung with that history, the broker's cycle check drops it, silently, when
// the rung dead-letters it back. Retries and in-progress trips drop the
// history; the dead-letter queue keeps it, for inspect.
func TestRungTripsDropTheBrokersDeathHistory(t *testing.T) {
	c := stepConsumer("reserve", 3)
	deaths := Table{plan.HeaderAttempt: int64(1), "x-first-death-queue": c.Queue, "x-first-death-reason": "delivery_limit",
		"x-death": []any{Table{"queue": c.Queue, "reason": "delivery_limit", "count": int64(1)}}}
	in := delivery(deaths, "")
	decisions := map[string]Decision{
		"retried":     Decide(c, route, in, Result{}, errors.New("down"), now, 0),
		"in progress": InProgress(c, in),
	}
	for name, d := range decisions {
		h := d.Publish[0].Headers
		for _, k := range []string{"x-death", "x-first-death-queue", "x-first-death-reason"} {
			if _, ok := h[k]; ok {
				t.Errorf("%s: the rung publish keeps %s", name, k)
			}
		}
	}
	if _, ok := in.Props.Headers["x-death"]; !ok {
		t.Error("the decision changed the delivery's own headers")
	}
	dl := Decide(c, route, delivery(deaths, ""), Result{}, fmt.Errorf("%w: bad", ErrFatal), now, 0)
	if _, ok := dl.Publish[0].Headers["x-death"]; !ok {
		t.Error("the dead-letter publish lost x-death, which inspect shows")
	}
}

// The reply of a run whose last step is declared `output: none` is empty,
// whatever its handler returned (FLOW-FORMAT §2).
func TestCompletedReplyIsEmptyAfterOutputNone(t *testing.T) {
	c := stepConsumer("dispatch", 2)
	c.Output = spec.OutputNone
	d := Decide(c, route, delivery(Table{plan.HeaderRoute: "validate,reserve,dispatch", plan.HeaderRoutePosition: int64(2)}, "client.q"),
		Result{Payload: []byte(`{"id":"2"}`)}, nil, now, 0)
	if len(d.Publish) != 1 || d.Publish[0].RoutingKey != "client.q" {
		t.Fatalf("Decide = %+v, want one reply to client.q", d)
	}
	if body := d.Publish[0].Body; len(body) != 0 {
		t.Errorf("completed reply after output: none carries %s, want an empty body", body)
	}
}

// A transient message (delivery mode 1, as a sender that is not ours may
// publish) goes to a classic rung, .dlq or .parked persistent: kept over a
// broker restart until someone looks.
func TestHeldMessagesArePersistent(t *testing.T) {
	c := stepConsumer("reserve", 1)
	in := InboundOf(Message{MessageID: "m-1", DeliveryMode: Transient, Body: []byte(`{}`), Timestamp: now})
	dl := Decide(c, route, in, Result{}, fmt.Errorf("%w: bad", ErrFatal), now, 0)
	for name, d := range map[string]Decision{
		"retried":       Decide(c, route, in, Result{}, errors.New("down"), now, 0),
		"dead-lettered": dl,
		"parked":        Park(c, dl, errors.New("no queue")),
		"in progress":   InProgress(c, in),
	} {
		if len(d.Publish) == 0 || d.Publish[0].DeliveryMode != Persistent {
			t.Errorf("%s: publishes %+v, want its message persistent", name, d.Publish)
		}
	}
	pk := Park(c, dl, errors.New("no queue"))
	if pk.Outcome != OutcomeDeadLettered || !pk.Parked || pk.Publish[0].RoutingKey != plan.ParkedQueue(c.Queue) ||
		!strings.Contains(pk.Reason, dl.Reason) || !strings.Contains(pk.Reason, "no queue") {
		t.Errorf("park = %+v, want the message to %s with both reasons", pk, plan.ParkedQueue(c.Queue))
	}
}

// A dead-lettered run's reply tells how far it got, as a completed or a
// stopped one's does: the slip as it arrived.
func TestADeadLetteredReplyCarriesTheSlip(t *testing.T) {
	c := &plan.Consumer{ID: "x.charge", Queue: "x.charge", Kind: plan.KindConsumer}
	in := InboundOf(Message{MessageID: "m-1", ReplyTo: "client.q", Body: []byte(`{}`), Timestamp: now,
		Headers: Table{plan.HeaderSlip: formatSlip}})
	d := Decide(c, nil, in, Result{}, fmt.Errorf("%w: declined", ErrFatal), now, 0)
	if d.Outcome != OutcomeDeadLettered || len(d.Publish) != 2 {
		t.Fatalf("Decide = %+v, want a dead-letter and a reply", d)
	}
	if got := HeaderText(d.Publish[1].Headers[plan.HeaderSlip]); got != formatSlip {
		t.Errorf("the reply's slip = %q, want the slip as it arrived %q", got, formatSlip)
	}
}
