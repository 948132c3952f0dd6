package runtime_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// A flow with an Avro type is refused by run, naming the type and where it
// is declared, until the runtime encodes and decodes Avro; the same flow
// with a JSON Schema type runs.
func TestSupportedRefusesAvroTypesNamingThem(t *testing.T) {
	const flow = `version: acemq.flow/v1
name: shop
plugins:
  k: {command: ./k}
types:
  Order:
TYPE
pipelines:
  - name: orders
    input: Order
    steps:
      - {name: a, handler: k.a}
`
	avro := compileText(t, strings.Replace(flow, "TYPE", "    avro: {type: record, name: Order, fields: [{name: id, type: string}]}", 1))
	err := runtime.Supported(avro)
	if !errors.Is(err, plan.ErrUnsupported) || !strings.Contains(err.Error(), `type "Order" is Avro`) || !strings.Contains(err.Error(), "f.yaml:") {
		t.Fatalf("Supported(an Avro type) = %v, want ErrUnsupported naming type Order and its position", err)
	}
	if _, err := runtime.New(avro, runtime.Options{AMQPURL: "amqp://127.0.0.1:1/"}); !errors.Is(err, plan.ErrUnsupported) {
		t.Errorf("New(an Avro type) = %v, want ErrUnsupported", err)
	}
	json := compileText(t, strings.Replace(flow, "TYPE", "    {type: object, properties: {id: {type: string}}}", 1))
	if err := runtime.Supported(json); err != nil {
		t.Errorf("Supported(a JSON Schema type) = %v, want nil", err)
	}
}
