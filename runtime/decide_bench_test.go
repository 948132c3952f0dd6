package runtime

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// BenchmarkDecideHop is the runtime's own work for one pipeline hop, broker
// and handler aside: read the delivery, check it, decide where the result
// goes.
func BenchmarkDecideHop(b *testing.B) {
	c := stepConsumer("validate", 0)
	d := amqp.Delivery{MessageId: "m-1", Body: make([]byte, 1024), Headers: amqp.Table{
		HeaderRoute: "validate,reserve,dispatch", HeaderRoutePosition: int64(0), HeaderAttempt: int64(1),
		HeaderFirstSeen: "2026-09-09T14:00:00Z", HeaderOrigin: "shop"}}
	b.ReportAllocs()
	for b.Loop() {
		in := InboundFrom(d)
		if dec := Precheck(c, in, now); dec != nil {
			b.Fatal("precheck refused")
		}
		dec := Decide(c, route, in, Result{Payload: in.Body}, nil, now, 0)
		if len(dec.Publish) != 1 {
			b.Fatal("no publish")
		}
	}
}
