package runtime_test

import (
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/runtime"
)

// A flow with an Avro type runs (FLOW-FORMAT §6): Supported accepts it, and
// New allocates its runtime given a schema registry; without one New
// refuses it, naming the type, its position and --store.
func TestSupportedAcceptsAvroTypes(t *testing.T) {
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
	if err := runtime.Supported(avro); err != nil {
		t.Fatalf("Supported(an Avro type) = %v, want nil", err)
	}
	if !runtime.NeedsRegistry(avro) {
		t.Error("NeedsRegistry(an Avro type) = false, want true")
	}
	_, err := runtime.New(avro, runtime.Options{AMQPURL: "amqp://127.0.0.1:1/"})
	if err == nil || !strings.Contains(err.Error(), "Order (f.yaml:") || !strings.Contains(err.Error(), "--store") {
		t.Errorf("New(an Avro type, no registry) = %v, want an error naming type Order, its position and --store", err)
	}
	if _, err := runtime.New(avro, runtime.Options{AMQPURL: "amqp://127.0.0.1:1/", Registry: memRegistry(t)}); err != nil {
		t.Errorf("New(an Avro type, a registry) = %v, want nil", err)
	}
	json := compileText(t, strings.Replace(flow, "TYPE", "    {type: object, properties: {id: {type: string}}}", 1))
	if err := runtime.Supported(json); err != nil {
		t.Errorf("Supported(a JSON Schema type) = %v, want nil", err)
	}
	if runtime.NeedsRegistry(json) {
		t.Error("NeedsRegistry(a JSON Schema type) = true, want false")
	}
}
