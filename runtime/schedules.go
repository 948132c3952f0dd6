package runtime

import (
	"context"
	"fmt"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/scheduler"
	"github.com/acemq/acemq-flow/runtime/tracing"
)

// newSchedules builds the loop of the plan's schedules (nil without any),
// registering its metrics with the runtime's, its firings' messages
// encoded by encode and then claim-checked in opts.Blobs. It refuses a plan with schedules and no store for
// their ticks.
func newSchedules(pl *plan.Plan, opts Options, m *metrics, encode func(context.Context, decide.Message) (decide.Message, error)) (*scheduler.Schedules, error) {
	if len(pl.Schedules) == 0 {
		return nil, nil
	}
	if opts.Schedules == nil {
		s := pl.Schedules[0]
		return nil, fmt.Errorf("%s: schedule %q needs a store to claim its ticks in, and none is configured; run with --store (sqlite:PATH for one runtime, postgres://… for several)", s.At, s.Name)
	}
	// A firing goes on the wire as PublishAt's messages do: encoded by its
	// Avro type, then by claim check above its threshold (FLOW-FORMAT §6),
	// so that what the outbox and the queue hold is the reference.
	onWire := func(ctx context.Context, msg decide.Message) (decide.Message, error) {
		msg, err := encode(ctx, msg)
		if err != nil {
			return msg, err
		}
		return ownClaimCheck(ctx, opts.Blobs, pl, msg)
	}
	return scheduler.NewSchedules(scheduler.SchedulesOptions{Plan: pl, Store: opts.Schedules, Metrics: m.reg, Log: opts.Log, Encode: onWire,
		Tracer: tracing.New(opts.Tracing)})
}

// startSchedules runs the schedules' loop beside the consumers until the
// runtime drains. A tick it claimed is in the outbox, so stopping it loses
// nothing: the relay publishes what it wrote.
func (r *Runtime) startSchedules(ctx context.Context) error {
	if r.schedules == nil {
		return nil
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.wg.Go(func() {
		<-r.stopping
		cancel()
	})
	r.wg.Go(func() { _ = r.schedules.Run(sctx) })
	return nil
}
