package runtime

import (
	"context"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
)

// destinationStep dead-letters a delivery whose decision publishes to an
// exchange that does not exist (a routing slip's next stop, say), naming
// the exchange, instead of publishing there (see destinations.go). When
// the broker cannot be asked, the publish goes ahead and its own outcome
// decides.
func (g *group) destinationStep(next stepFunc) stepFunc {
	return func(ctx context.Context, d *delivery) decide.Decision {
		dec := next(ctx, d)
		for _, p := range dec.Publish {
			if p.BestEffort || g.r.owned[p.Exchange] {
				continue
			}
			exists, err := g.r.exchanges.Exists(ctx, p.Exchange)
			if err != nil || exists {
				continue
			}
			return decide.MissingExchange(g.c, d.in, p.Exchange, p.RoutingKey, time.Now())
		}
		return dec
	}
}
