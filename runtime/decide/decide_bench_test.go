package decide

import (
	"testing"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// BenchmarkDecideHop is the runtime's own work for one pipeline hop, broker
// and handler aside: read the delivery, check it, decide where the result
// goes.
func BenchmarkDecideHop(b *testing.B) {
	c := stepConsumer("validate", 0)
	d := Message{MessageID: "m-1", Body: make([]byte, 1024), Headers: Table{
		plan.HeaderRoute: "validate,reserve,dispatch", plan.HeaderRoutePosition: int64(0), plan.HeaderAttempt: int64(1),
		plan.HeaderFirstSeen: "2026-09-09T14:00:00Z", plan.HeaderOrigin: "shop"}}
	b.ReportAllocs()
	for b.Loop() {
		in := InboundOf(d)
		if dec := Precheck(c, in, now); dec != nil {
			b.Fatal("precheck refused")
		}
		dec := Decide(c, route, in, Result{Payload: in.Body}, nil, now, 0)
		if len(dec.Publish) != 1 {
			b.Fatal("no publish")
		}
	}
}
