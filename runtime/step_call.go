package runtime

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
)

// callStep calls the handler, under the group's timeout when the caller
// applies none of its own, times it, and decides where its result goes.
func (g *group) callStep() stepFunc {
	return func(ctx context.Context, d *delivery) decide.Decision {
		cctx := ctx
		if g.tmo > 0 {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, g.tmo)
			defer cancel()
		}
		in := d.in
		start := time.Now()
		res, err := g.call(cctx, Request{Handler: g.c.Handler, Envelope: in.Env, Payload: in.Body, Queue: g.c.Queue, ReceivedAt: d.received})
		end := time.Now()
		g.mDuration.Observe(end.Sub(start).Seconds())
		if err != nil && g.log.Enabled(ctx, slog.LevelDebug) {
			g.log.Debug("handler failed", "message_id", in.Env.MessageID, "attempt", in.Env.Attempt, "error", err, "duration", end.Sub(start))
		}
		return decide.Decide(g.c, g.route, in, res, err, end, rand.Float64())
	}
}
