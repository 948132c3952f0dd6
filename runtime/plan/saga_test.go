package plan_test

import (
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestSagaConsumers: each saga step and compensation has a consumer on its
// queue, idempotent whatever the defaults say, with the step's retry
// ladder and the saga's input; a saga with a timeout has its timeout's,
// with no handler and no input type.
func TestSagaConsumers(t *testing.T) {
	set, err := spec.Load(testenv.FlowFS(`version: acemq.flow/v1
name: shop
defaults: {idempotent: false, concurrency: 3}
plugins:
  p: {command: ./p}
types:
  Order: {type: object}
  Payment: {type: object}
sagas:
  - name: order
    input: Order
    timeout: 10m
    steps:
      - {name: charge, handler: p.charge, compensate: p.refund, output: Payment, retry: {max_attempts: 3}}
      - {name: book, handler: p.book}
`), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range p.Consumers {
		got = append(got, strings.Join([]string{c.ID, string(c.Kind), c.Queue, c.Handler, c.Input, c.Output, c.Step, c.Saga,
			map[bool]string{true: "compensate", false: "-"}[c.Compensate], map[bool]string{true: "idempotent", false: "-"}[c.Idempotent]}, " "))
		if c.Concurrency != 3 || len(c.Retry.Rungs) == 0 {
			t.Errorf("consumer %s: concurrency %d, %d rungs; want the defaults' 3 and a ladder", c.ID, c.Concurrency, len(c.Retry.Rungs))
		}
	}
	want := []string{
		"order.book saga-step order.book p.book Order  book order - idempotent",
		"order.charge saga-step order.charge p.charge Order Payment charge order - idempotent",
		"order.charge.compensate saga-step order.charge.compensate p.refund Order  charge order compensate idempotent",
		"order.timeout saga-timeout order.timeout     order - idempotent",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Compile: consumers\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := p.Saga("order"); s == nil || s.TimeoutQueue != "order.timeout" {
		t.Errorf("Saga(order) = %+v, want its timeout queue order.timeout", s)
	}
	for _, c := range p.Consumers {
		if c.ID == "order.charge" && c.Retry.MaxAttempts != 3 {
			t.Errorf("order.charge: %d attempts, want the step's 3", c.Retry.MaxAttempts)
		}
	}
}

// TestSagaTimeoutQueueCollidesWithAStepNamedTimeout: a saga with a timeout
// and a step named timeout would share a queue; Compile says so.
func TestSagaTimeoutQueueCollidesWithAStepNamedTimeout(t *testing.T) {
	set, err := spec.Load(testenv.FlowFS(`version: acemq.flow/v1
name: shop
plugins:
  p: {command: ./p}
sagas:
  - name: order
    timeout: 10m
    steps:
      - {name: timeout, handler: p.t}
`), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = plan.Compile(set.Flows)
	ds, ok := err.(spec.Diagnostics)
	if !ok || len(ds) != 1 || ds[0].Code != "queue-collision" || !strings.Contains(ds[0].Msg, `queue "order.timeout"`) || !strings.Contains(ds[0].Msg, "the timeout of saga") {
		t.Errorf("Compile = %v, want one queue-collision naming order.timeout and the saga's timeout", err)
	}
}
