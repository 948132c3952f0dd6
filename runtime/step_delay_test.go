package runtime_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

const delayFlow = `version: acemq.flow/v1
name: d
plugins:
  k: {command: ./not-started}
pipelines:
  - name: hold
    steps:
      - {name: reserve, handler: k.echo}
      - {name: check, handler: k.check, delay: 3s}
`

// TestAStepDelayPassesThroughTheLadder: the output of the step before a
// step with `delay:` enters the ladder addressed to the step's queue and
// arrives when due, never early, with the ladder's headers; the ladder's
// unit is 100 ms here, so "3 s" passes in 0.3 s.
func TestAStepDelayPassesThroughTheLadder(t *testing.T) {
	url := testenv.VHost(t)
	unit := 100 * time.Millisecond
	type arrival struct {
		at      time.Time
		headers decide.Table
	}
	arrived := make(chan arrival, 1)
	check := func(_ context.Context, req runtime.Request) (decide.Result, error) {
		arrived <- arrival{time.Now(), req.Envelope.Headers}
		return decide.Result{Payload: req.Payload}, nil
	}
	runtimetest.Start(t, url, delayFlow, runtime.Options{LadderUnit: unit,
		Handlers: map[string]runtime.HandlerFunc{"k.echo": runtimetest.Echo, "k.check": check}})
	ch := testenv.ConfirmedChannel(t, url)
	sent := time.Now()
	if err := ch.PublishWithContext(t.Context(), "hold", "reserve", true, false, amqp.Publishing{MessageId: "m1", Body: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-arrived:
		if waited := a.at.Sub(sent); waited < 3*unit || waited > 3*unit+time.Second {
			t.Errorf("check got its input %s after the send, want 300ms to 1.3s", waited)
		}
		if a.headers[plan.HeaderDeliverExchange] != "hold" || a.headers[plan.HeaderDeliverRoutingKey] != "check" || a.headers[plan.HeaderDueAt] == nil {
			t.Errorf("check's input headers %v lack the ladder's destination and due time", a.headers)
		}
		due, err := time.Parse(time.RFC3339Nano, decide.HeaderText(a.headers[plan.HeaderDueAt]))
		if err != nil || a.at.Before(due) {
			t.Errorf("delivered at %s, before its due time %s (%v)", a.at, due, err)
		}
		if _, ok := a.headers["x-death"]; ok {
			t.Error("the delivered message still carries x-death")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("check got no input within 10s")
	}
}

// TestTheLadderIsDriftReported: a level that exists with other settings (a
// classic queue, another TTL) refuses the start, named, as any queue the
// flows declare: the ladder is declared create-only.
func TestTheLadderIsDriftReported(t *testing.T) {
	url := testenv.VHost(t)
	ch := testenv.ConfirmedChannel(t, url)
	if _, err := ch.QueueDeclare(plan.LadderQueue(3), true, false, false, false, amqp.Table{"x-queue-type": "classic", "x-message-ttl": int64(5000)}); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(&plan.Plan{}, runtime.Options{AMQPURL: url, Delays: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(t.Context()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), plan.LadderQueue(3)) || !strings.Contains(err.Error(), "quorum") {
			t.Errorf("Run = %v, want a refusal naming %s and its type", err, plan.LadderQueue(3))
		}
	case <-rt.Started():
		t.Fatal("the runtime started over a level of the wrong type")
	case <-time.After(60 * time.Second):
		t.Fatal("Run neither failed nor started within 60s")
	}
}
