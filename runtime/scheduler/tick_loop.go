package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/stores"
)

// tickStore is what the schedules' loop needs of the store
// (stores.ScheduleTicks).
type tickStore interface {
	ClaimTick(ctx context.Context, schedule string, tick time.Time, rec stores.OutboxRecord) (bool, error)
	LastTick(ctx context.Context, schedule string) (time.Time, bool, error)
}

// SchedulesOptions configure the schedules' loop.
type SchedulesOptions struct {
	// Plan holds the schedules, and the pipelines and itineraries they send
	// to. Required.
	Plan *plan.Plan
	// Store decides which replica fires a tick and keeps the firing's
	// outbox record. Required. Its outbox records are published by a relay
	// the caller runs (`acemq-flow run` runs one whenever the flows have
	// schedules).
	Store tickStore
	// Metrics is where the loop's metrics are registered; nil keeps them
	// unregistered.
	Metrics prometheus.Registerer
	// Log receives firings (debug), missed ticks (warn) and store failures;
	// nil discards.
	Log *slog.Logger
	// Encode, when set, returns a firing's message as it goes on the wire:
	// the runtime's codec, which encodes a JSON payload for an Avro input
	// type as Avro and puts a body above its claim_check.above in the blob
	// store, the message carrying the reference (FLOW-FORMAT §6), as send
	// does. While it fails (the schema registry or the blob store not
	// answering) the tick is neither fired nor lost: it is tried again, as
	// a store failure is.
	Encode func(ctx context.Context, m decide.Message) (decide.Message, error)
	// Tracer makes each firing a span of its own, "schedule <key>" (kind
	// producer, the root of a new trace: a tick is nobody's child), in
	// whose context the tick's outbox record is written, so that the
	// firing's message has it as its creation context; nil traces nothing.
	Tracer *tracing.Tracer
}

// LateAfter is how late a tick may be reached while the loop runs and
// still fire as on time: one reached later (the store was unreachable
// longer) is a missed tick, which the schedule's `missed` decides about.
const LateAfter = time.Minute

// fireLimit bounds the ticks one pass of a loop fires (missed: all after a
// long outage); the next pass goes on from there.
const fireLimit = 1000

// Schedules is the loop every runtime replica runs: for each schedule, at
// each tick, it claims the tick in the store with the firing's outbox
// record, one insert winning across replicas (FLOW-FORMAT §4). At start it
// reads the schedule's last claimed tick and deals with the ticks missed
// since as the schedule's `missed` says, within `missed_window`, counting
// the ones it does not fire. It never publishes itself: the relay does,
// so a firing whose tick is claimed is published even when this replica
// dies right after.
//
// Lifecycle: NewSchedules checks every schedule's message and allocates;
// Run loops until ctx ends. Safe for one Run.
type Schedules struct {
	opts      SchedulesOptions
	log       *slog.Logger
	schedules []*schedule
	fired     *prometheus.CounterVec
	missed    *prometheus.CounterVec
	lost      *prometheus.CounterVec
}

type schedule struct {
	plan.Schedule
	ticker decide.Ticker
}

// NewSchedules returns the loop of opts.Plan's schedules. It fails, naming
// the schedule and its position, when one cannot be computed or its message
// cannot be built (a payload that is not its pipeline's input type, a
// target that is not there).
func NewSchedules(opts SchedulesOptions) (*Schedules, error) {
	if opts.Plan == nil || opts.Store == nil {
		return nil, errors.New("schedules: a plan and a store are required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s := &Schedules{opts: opts, log: opts.Log,
		fired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "acemq_schedule_firings_total",
			Help: "Ticks this runtime claimed, each written to the outbox with its firing's message.",
		}, []string{"schedule"}),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "acemq_schedule_missed_ticks_total",
			Help: "Ticks that came due while no runtime could fire them, and that this runtime did not fire (missed: latest, all or skip, missed_window).",
		}, []string{"schedule"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "acemq_schedule_ticks_claimed_elsewhere_total",
			Help: "Ticks this runtime reached that another replica had claimed first.",
		}, []string{"schedule"}),
	}
	var errs []error
	for _, ps := range opts.Plan.Schedules {
		tk, err := decide.NewTicker(ps.Cron, time.Duration(ps.Every), ps.Timezone)
		if err != nil {
			errs = append(errs, fmt.Errorf("schedule %q (%s): %w", ps.Name, ps.At, err))
			continue
		}
		// Every tick's message is built the same way: one built now says
		// whether any can be.
		if _, err := decide.TickMessage(opts.Plan, ps, time.Unix(0, 0)); err != nil {
			errs = append(errs, err)
			continue
		}
		s.schedules = append(s.schedules, &schedule{Schedule: ps, ticker: tk})
		for _, v := range []*prometheus.CounterVec{s.fired, s.missed, s.lost} {
			v.WithLabelValues(ps.Key())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{s.fired, s.missed, s.lost} {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("schedules: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Run runs every schedule's loop until ctx ends, and returns nil then.
func (s *Schedules) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, sc := range s.schedules {
		wg.Go(func() { s.loop(ctx, sc) })
	}
	s.log.Info("schedules started", "schedules", len(s.schedules))
	wg.Wait()
	return nil
}

// loop fires one schedule's ticks until ctx ends.
func (s *Schedules) loop(ctx context.Context, sc *schedule) {
	log := s.log.With("flow", sc.Flow, "schedule", sc.Name)
	started := time.Now()
	cursor, ok := s.lastTick(ctx, sc, log)
	if ctx.Err() != nil {
		return
	}
	if !ok {
		// A new schedule has missed nothing: it starts with the next tick.
		cursor = started
	}
	for {
		now := time.Now()
		// Ticks due before this loop started were missed; so are ticks
		// reached much later than due while it runs.
		upTo := started
		if late := now.Add(-LateAfter); late.After(upTo) {
			upTo = late
		}
		p := decide.PlanTicks(sc.ticker, cursor, now, upTo, sc.Missed, time.Duration(sc.MissedWindow), fireLimit)
		if p.Missed > 0 {
			s.missed.WithLabelValues(sc.Key()).Add(float64(p.Missed))
			log.Warn("schedule ticks missed", "missed", p.Missed, "policy", sc.Missed, "window", time.Duration(sc.MissedWindow),
				"since", TickText(cursor))
		}
		for _, tick := range p.Fire {
			if !s.fire(ctx, sc, tick, log) {
				return
			}
		}
		cursor = p.Cursor
		next := sc.ticker.Next(cursor)
		if next.IsZero() {
			log.Warn("schedule has no tick within five years; it never fires", "cron", sc.Cron)
			<-ctx.Done()
			return
		}
		if !sleepUntil(ctx, next) {
			return
		}
	}
}

// lastTick reads where the schedule stopped, trying again while the store
// fails, until ctx ends.
func (s *Schedules) lastTick(ctx context.Context, sc *schedule, log *slog.Logger) (time.Time, bool) {
	for attempt := 1; ; attempt++ {
		last, ok, err := s.opts.Store.LastTick(ctx, sc.Key())
		if err == nil {
			return last, ok
		}
		if ctx.Err() != nil {
			return time.Time{}, false
		}
		d := backoff(attempt)
		log.Warn("schedule's last tick could not be read; trying again", "error", err, "attempt", attempt, "duration", d)
		if !sleepUntil(ctx, time.Now().Add(d)) {
			return time.Time{}, false
		}
	}
}

// fire claims tick with its firing's outbox record, trying again while the
// store fails (the tick neither fired nor was lost), and reports false only
// when ctx ended first.
func (s *Schedules) fire(ctx context.Context, sc *schedule, tick time.Time, log *slog.Logger) bool {
	m, err := decide.TickMessage(s.opts.Plan, sc.Schedule, tick)
	if err != nil {
		// NewSchedules built this schedule's message: it cannot fail here.
		log.Error("schedule tick not fired: its message cannot be built", "tick", TickText(tick), "error", err)
		return true
	}
	if m, err = s.encode(ctx, m, tick, log); err != nil {
		return false
	}
	rec := OutboxRecord(m)
	cctx := ctx // the claim's: the firing's span, when tracing
	if t := s.opts.Tracer; t != nil {
		var span trace.Span
		// A root whatever ctx carries.
		root := trace.ContextWithSpanContext(ctx, trace.SpanContext{})
		cctx, span = t.Start(root, "schedule "+sc.Key(), trace.SpanKindProducer, nil,
			tracing.AttrFlow.String(sc.Flow), tracing.AttrSchedule.String(sc.Name),
			tracing.AttrScheduleTick.String(TickText(tick)), semconv.MessagingMessageID(m.MessageID),
			// The messaging conventions' "create" span: the message's
			// creation context, published later (by the relay).
			semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeCreate, semconv.MessagingOperationName("create"),
			semconv.MessagingDestinationName(m.Exchange), semconv.MessagingRabbitMQDestinationRoutingKey(m.RoutingKey))
		rec.TraceParent = tracing.TraceParent(cctx)
		defer span.End()
	}
	for attempt := 1; ; attempt++ {
		claimed, err := s.opts.Store.ClaimTick(cctx, sc.Key(), tick, rec)
		switch {
		case err == nil && claimed:
			s.fired.WithLabelValues(sc.Key()).Inc()
			log.Debug("schedule fired", "tick", TickText(tick), "message_id", m.MessageID, "exchange", m.Exchange, "routing_key", m.RoutingKey)
			setOutcome(cctx, "fired")
			return true
		case err == nil:
			s.lost.WithLabelValues(sc.Key()).Inc()
			log.Debug("schedule tick claimed by another replica", "tick", TickText(tick))
			setOutcome(cctx, "claimed_elsewhere")
			return true
		case ctx.Err() != nil:
			setOutcome(cctx, "stopped")
			return false
		}
		d := backoff(attempt)
		lvl := slog.LevelWarn
		if attempt == 10 {
			lvl = slog.LevelError
		}
		log.Log(ctx, lvl, "schedule tick claim failed; trying again", "tick", TickText(tick), "error", err, "attempt", attempt, "duration", d)
		if !sleepUntil(ctx, time.Now().Add(d)) {
			return false
		}
	}
}

// setOutcome records a firing's outcome on its span, when ctx has one.
func setOutcome(ctx context.Context, outcome string) {
	trace.SpanFromContext(ctx).SetAttributes(tracing.AttrOutcome.String(outcome))
}

// encode returns m as Encode has it go on the wire, trying again while
// Encode fails; it fails only when ctx ended first.
func (s *Schedules) encode(ctx context.Context, m decide.Message, tick time.Time, log *slog.Logger) (decide.Message, error) {
	if s.opts.Encode == nil {
		return m, nil
	}
	for attempt := 1; ; attempt++ {
		out, err := s.opts.Encode(ctx, m)
		if err == nil {
			return out, nil
		}
		if ctx.Err() != nil {
			return m, ctx.Err()
		}
		d := backoff(attempt)
		lvl := slog.LevelWarn
		if attempt == 10 {
			lvl = slog.LevelError
		}
		log.Log(ctx, lvl, "schedule tick not encoded; trying again", "tick", TickText(tick), "error", err, "attempt", attempt, "duration", d)
		if !sleepUntil(ctx, time.Now().Add(d)) {
			return m, ctx.Err()
		}
	}
}

// backoff doubles from 100ms per failed attempt, up to 5s.
func backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < attempt && d < 5*time.Second; i++ {
		d *= 2
	}
	return min(d, 5*time.Second)
}

// sleepUntil waits until t and reports whether ctx is still live.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
