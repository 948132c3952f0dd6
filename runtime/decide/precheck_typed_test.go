package decide

import (
	"testing"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestPrecheckTrustsATypedBody: a body the codec decoded from Avro by the
// input type itself (Inbound.Typed) is not parsed and checked again, while
// a broken slip is still fatal; the same body untyped is checked.
func TestPrecheckTrustsATypedBody(t *testing.T) {
	set, err := spec.Load(testenv.FlowFS(`version: acemq.flow/v1
name: shop
types:
  Order: {avro: {type: record, name: Order, fields: [{name: id, type: string}]}}
plugins:
  p: {command: ./p}
pipelines:
  - name: fulfilment
    input: Order
    steps:
      - {name: validate, handler: p.validate}
`), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	c := &pl.Consumers[0]
	// Not an Order: only the check would notice.
	in := InboundOf(Message{MessageID: "m-1", Body: []byte(`{"id":5}`)})
	if d := Precheck(c, in, now); d == nil || d.Outcome != OutcomeDeadLettered {
		t.Fatalf("Precheck of an untyped body that is not an Order = %+v, want dead-lettered", d)
	}
	in.Typed = true
	if d := Precheck(c, in, now); d != nil {
		t.Errorf("Precheck of a typed body = %+v, want nil: the codec decoded it by the type", d)
	}
	broken := InboundOf(Message{MessageID: "m-2", Headers: Table{plan.HeaderSlip: "{not json"}, Body: []byte(`{"id":"o-1"}`)})
	broken.Typed = true
	if d := Precheck(c, broken, now); d == nil || d.Outcome != OutcomeDeadLettered {
		t.Errorf("Precheck of a typed body with a broken slip = %+v, want dead-lettered", d)
	}
}
