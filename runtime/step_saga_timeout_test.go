package runtime

import (
	"bytes"
	"context"
	"log/slog"
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

const sagaTimeoutFlow = `version: acemq.flow/v1
name: shop
plugins:
  p: {command: ./p}
sagas:
  - name: slow
    timeout: 1h
    steps:
      - {name: charge, handler: p.charge, compensate: p.refund}
      - {name: book,   handler: p.book}
`

// TestSagaWrapperTimeoutWhileAHandlerRuns: the saga's timeout arrives
// while the second step's handler runs. The timeout fails that step and
// sends the first step's compensation; the handler's result, when it
// comes, finds the instance moved on: a duplicate, not recorded, and
// logged as an error, since what it did is not undone. The timeout was
// put in the ladder before the first handler ran, due an hour after the
// start.
func TestSagaWrapperTimeoutWhileAHandlerRuns(t *testing.T) {
	set, err := spec.Load(fstest.MapFS{"f.yaml": {Data: []byte(sagaTimeoutFlow)}}, "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	s := p.Saga("slow")
	store, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	consumer := func(id string) *plan.Consumer {
		for i := range p.Consumers {
			if p.Consumers[i].ID == id {
				return &p.Consumers[i]
			}
		}
		t.Fatalf("no consumer %q", id)
		return nil
	}
	var timeouts []decide.Message
	var dues []time.Time
	timeout := &sagaCall{saga: s, c: consumer(plan.TimeoutConsumerID("slow")), store: store, now: time.Now, log: log}
	var timedOut decide.Decision
	call := func(ctx context.Context, req Request) (decide.Result, error) {
		if req.Handler == "p.book" {
			// The timeout comes while book runs.
			timedOut = timeout.step(ctx, &delivery{in: decide.InboundOf(timeouts[0])})
		}
		return decide.Result{Payload: []byte(`{}`)}, nil
	}
	publish := func(_ context.Context, m decide.Message, due time.Time) error {
		timeouts, dues = append(timeouts, m), append(dues, due)
		return nil
	}
	charge := &sagaCall{saga: s, c: consumer("slow.charge"), store: store, now: time.Now, call: call, publishTimeout: publish, log: log}
	book := &sagaCall{saga: s, c: consumer("slow.book"), store: store, now: time.Now, call: call, publishTimeout: publish, log: log}

	start, err := decide.FirstMessage(p, decide.Target{Saga: "slow"}, []byte(`{}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dec := charge.step(t.Context(), &delivery{in: decide.InboundOf(start)})
	if dec.Outcome != decide.OutcomeAcknowledged || len(dec.Publish) != 1 || len(timeouts) != 1 {
		t.Fatalf("charge: %s, %d published, %d timeouts put in the ladder; want acknowledged, book's message, one timeout", dec.Outcome, len(dec.Publish), len(timeouts))
	}
	inst, _, _ := store.GetSaga(t.Context(), start.MessageID)
	if want := inst.StartedAt.Add(time.Hour); !dues[0].Equal(want) || timeouts[0].RoutingKey != plan.TimeoutKey {
		t.Errorf("the timeout is due %s on key %q, want %s (an hour after the start) on %q", dues[0], timeouts[0].RoutingKey, want, plan.TimeoutKey)
	}
	late := book.step(t.Context(), &delivery{in: decide.InboundOf(dec.Publish[0].Message)})
	if len(timeouts) != 1 {
		t.Errorf("book put %d more timeouts in the ladder, want none: a step completed before it", len(timeouts)-1)
	}
	if timedOut.Outcome != decide.OutcomeAcknowledged || len(timedOut.Publish) != 1 || timedOut.Publish[0].RoutingKey != plan.CompensateKey("charge") {
		t.Errorf("the timeout: %s, publishing %v; want acknowledged, charge's compensation", timedOut.Outcome, timedOut.Publish)
	}
	if late.Outcome != decide.OutcomeDuplicate || len(late.Publish) != 1 || late.Publish[0].MessageID != timedOut.Publish[0].MessageID {
		t.Errorf("book's late result: %s, publishing %v; want a duplicate sending again only the compensation, with its id", late.Outcome, late.Publish)
	}
	inst, _, _ = store.GetSaga(t.Context(), start.MessageID)
	if inst.State != stores.SagaCompensating || inst.Steps[1].State != stores.StepFailed || !strings.Contains(inst.Steps[1].Error, "timeout (1h0m0s)") {
		t.Errorf("instance %s, book %s (%q); want compensating, book failed by the timeout", inst.State, inst.Steps[1].State, inst.Steps[1].Error)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "not undone") {
		t.Errorf("the late result logged %q, want an error saying what it did is not undone", logs.String())
	}
}
