package runtime

import (
	"context"
	"slices"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/scheduler"
)

// A step with `delay:` (FLOW-FORMAT §4) gets its input through the delay
// ladder: the previous step's output (or a routing slip's, to the step's
// queue) is published into the ladder addressed to the step, and the
// previous step acknowledges once that publish is confirmed, as for any
// output. The `.due` consumer (runtime/scheduler) delivers it when due.
//
// Which runtimes declare the ladder and consume `.due`: one whose plan has
// a step delay, and one started with Options.Delays, as `acemq-flow run`
// always is, so that a message sent with `send --in` to any running flow is
// delivered.

// usesLadder reports whether pl needs the delay ladder: a step has a
// delay, or a saga a timeout.
func usesLadder(pl *plan.Plan) bool {
	return len(decide.DelayedSteps(pl)) > 0 || slices.ContainsFunc(pl.Sagas, func(s plan.Saga) bool { return s.Timeout > 0 })
}

// withLadder is pl with the delay ladder's topology (plan.Ladder) added, so
// that it is declared, checked and drift-reported as the flows' own
// (create-only); pl itself is not changed.
func withLadder(pl *plan.Plan, unit time.Duration) *plan.Plan {
	out := *pl
	xs, qs, bs := plan.Ladder(unit)
	out.Exchanges = slices.Clone(pl.Exchanges)
	for _, x := range xs {
		if !slices.ContainsFunc(out.Exchanges, func(e plan.Exchange) bool { return e.Name == x.Name }) {
			out.Exchanges = append(out.Exchanges, x)
		}
	}
	out.Queues = slices.Clone(pl.Queues)
	for _, q := range qs {
		if !slices.ContainsFunc(out.Queues, func(e plan.Queue) bool { return e.Name == q.Name }) {
			out.Queues = append(out.Queues, q)
		}
	}
	out.Bindings = append(slices.Clone(pl.Bindings), bs...)
	return &out
}

// delayStep sends what a decision publishes to a delayed step into the
// ladder instead, due the step's delay from now.
func (g *group) delayStep(next stepFunc) stepFunc {
	if len(g.r.delayed) == 0 {
		return next
	}
	return func(ctx context.Context, d *delivery) decide.Decision {
		dec := next(ctx, d)
		return g.r.delayed.Apply(*g.r.ladder, g.c, d.in, dec, time.Now())
	}
}

// startDue starts the `.due` consumer when the runtime declares the
// ladder; it drains when Run does, beside the consumer groups.
func (r *Runtime) startDue(ctx context.Context) error {
	if r.ladder == nil {
		return nil
	}
	due, err := scheduler.NewDue(r.consume, r.publish, scheduler.DueOptions{Ladder: *r.ladder, DrainTimeout: r.opts.DrainTimeout,
		Name: r.opts.Name, Metrics: r.metrics.reg, Log: r.log, Tracer: r.tracer})
	if err != nil {
		return err
	}
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.wg.Go(func() {
		<-r.stopping
		cancel()
	})
	r.wg.Go(func() {
		if err := due.Run(dctx); err != nil {
			r.log.Error("delay ladder's due consumer stopped; delayed messages wait in acemq.schedule.due until a runtime consumes it", "error", err)
		}
	})
	return nil
}
