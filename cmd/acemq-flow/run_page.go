package main

import (
	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/stores"
)

// statusPage gives the admin listener what its status page reads beside
// the engine: the broker at amqpURL (the delay ladder and the dead
// letters, their Avro previews decoded by the runtime's codec), and set's
// schedule ticks and saga instances when a store is open (set nil: none).
func statusPage(opts *admin.Options, amqpURL string, pl *plan.Plan, set stores.Set) {
	reads := ops.StatusReads{URL: amqpURL, Plan: pl}
	if rt, ok := opts.Runtime.(*runtime.Runtime); ok && rt != nil {
		if d := rt.AvroPreviews(); d != nil {
			reads.Decoder = d
		}
	}
	opts.Broker = reads
	if set != nil {
		opts.Ticks, opts.Sagas = set, set
	}
}
