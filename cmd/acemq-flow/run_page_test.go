package main

import (
	"testing"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/test/testenv"
)

// The status page run serves reads its dead letters' Avro bodies with the
// runtime's codec (ops.StatusReads.Decoder), so that they are previewed as
// JSON as inspect shows them; flows without Avro types have no decoder.
func TestStatusPageDecodesAvroDeadLetters(t *testing.T) {
	compile := func(flow string) *plan.Plan {
		t.Helper()
		set, err := spec.Load(testenv.FlowFS(flow), "f.yaml")
		if err != nil {
			t.Fatal(err)
		}
		pl, err := plan.Compile(set.Flows)
		if err != nil {
			t.Fatal(err)
		}
		return pl
	}
	reg, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	for _, tc := range []struct {
		name, flow string
		decoder    bool
	}{
		{"flows with an Avro type", "version: acemq.flow/v1\nname: a\ntypes:\n  O: {avro: {type: record, name: O, fields: [{name: id, type: string}]}}\nplugins:\n  k: {command: ./x}\nconsumers:\n  - {id: c, queue: a.c, handler: k.c, input: O}\n", true},
		{"flows without one", "version: acemq.flow/v1\nname: j\nplugins:\n  k: {command: ./x}\nconsumers:\n  - {id: c, queue: j.c, handler: k.c}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := compile(tc.flow)
			rt, err := runtime.New(pl, runtime.Options{AMQPURL: "amqp://127.0.0.1:1/", Registry: reg})
			if err != nil {
				t.Fatal(err)
			}
			opts := admin.Options{Runtime: rt}
			statusPage(&opts, "amqp://127.0.0.1:1/", pl, nil)
			reads, ok := opts.Broker.(ops.StatusReads)
			if !ok {
				t.Fatalf("statusPage set Broker to %T, want ops.StatusReads", opts.Broker)
			}
			if got := reads.Decoder != nil; got != tc.decoder {
				t.Errorf("statusPage: StatusReads.Decoder set %v, want %v", got, tc.decoder)
			}
		})
	}
}
