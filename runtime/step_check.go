package runtime

import (
	"context"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
)

// checkStep refuses a delivery that cannot be handled at all before
// anything else runs: a slip that cannot be parsed or a payload that does
// not match the input type is dead-lettered at once, never retried. The
// result's check against the output type is part of the decision after the
// call.
func (g *group) checkStep(next stepFunc) stepFunc {
	return func(ctx context.Context, d *delivery) decide.Decision {
		if dec := decide.Precheck(g.c, d.in, time.Now()); dec != nil {
			return *dec
		}
		return next(ctx, d)
	}
}
