package runtime_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

const requestFlow = `version: acemq.flow/v1
name: r
plugins:
  k: {command: ./not-started}
pipelines:
  - name: ask
    steps:
      - {name: first, handler: k.look}
`

// TestAHandlerIsToldItsQueueAndWhenTheDeliveryWasReceived: the rest of the
// seed's Message<T>, beside the envelope: the queue the message came from
// and the runtime's time of receipt, no later than the call. A step is no
// compensation and has no step output.
func TestAHandlerIsToldItsQueueAndWhenTheDeliveryWasReceived(t *testing.T) {
	url := testenv.VHost(t)
	type seen struct {
		req  runtime.Request
		call time.Time
	}
	got := make(chan seen, 1)
	look := func(_ context.Context, req runtime.Request) (decide.Result, error) {
		got <- seen{req, time.Now()}
		return decide.Result{Payload: req.Payload}, nil
	}
	runtimetest.Start(t, url, requestFlow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{"k.look": look}})
	ch := testenv.ConfirmedChannel(t, url)
	sent := time.Now()
	if err := ch.PublishWithContext(t.Context(), "ask", "first", true, false, amqp.Publishing{MessageId: "m1", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s.req.Queue != "ask.first" {
			t.Errorf("the handler's request names queue %q, want ask.first", s.req.Queue)
		}
		if r := s.req.ReceivedAt; r.Before(sent.Add(-time.Second)) || r.After(s.call) {
			t.Errorf("the handler's request was received at %s, want after the send (%s) and no later than the call (%s)", r, sent, s.call)
		}
		if s.req.Compensate || s.req.StepOutput != nil {
			t.Errorf("a pipeline step's request: compensate %v, step output %q; want neither", s.req.Compensate, s.req.StepOutput)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not called within 10s")
	}
}
