package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// ErrUnknownConsumer is returned for a consumer id no flow declares.
var ErrUnknownConsumer = errors.New("no such consumer")

func (r *Runtime) group(id string) (*group, error) {
	if !r.running() {
		return nil, fmt.Errorf("consumer %q: %w", id, ErrNotStarted)
	}
	g, ok := r.groups[id]
	if !ok {
		return nil, fmt.Errorf("%w %q; `acemq-flow consumers list` shows the ids", ErrUnknownConsumer, id)
	}
	return g, nil
}

// ErrNotStarted is returned by the registry's calls while Run has not
// started the consumers yet.
var ErrNotStarted = errors.New("the runtime has not started its consumers yet; try again once /readyz says ready")

// ErrShuttingDown is returned by calls that would start, grow or restart consumers
// once the runtime is draining.
var ErrShuttingDown = errors.New("the runtime is shutting down")

// running reports whether Run has started the groups; after that the
// groups map is never written again, so reading it needs no lock.
func (r *Runtime) running() bool {
	select {
	case <-r.started:
		return true
	default:
		return false
	}
}

// Consumers lists every consumer group with its state, queue, size,
// prefetch and counters, sorted by id.
func (r *Runtime) Consumers(ctx context.Context) []ConsumerStatus {
	out := []ConsumerStatus{}
	if !r.running() {
		return out
	}
	for _, id := range r.order {
		out = append(out, r.groups[id].snapshot(ctx))
	}
	return out
}

// Consumer returns one consumer group's status.
func (r *Runtime) Consumer(ctx context.Context, id string) (ConsumerStatus, error) {
	g, err := r.group(id)
	if err != nil {
		return ConsumerStatus{}, err
	}
	return g.snapshot(ctx), nil
}

// Start starts a stopped consumer group. Its queue is checked again (and,
// for a consumer that declares it, declared), and the start is refused
// while the queue is missing.
func (r *Runtime) Start(ctx context.Context, id string) error {
	g, err := r.group(id)
	if err != nil {
		return err
	}
	if err := r.ensurePlugin(ctx, g.c); err != nil {
		return fmt.Errorf("consumer %q: %w", id, err)
	}
	return g.start(ctx)
}

// Stop drains a consumer group, as shutdown does, and stops it.
func (r *Runtime) Stop(id string) error {
	g, err := r.group(id)
	if err != nil {
		return err
	}
	g.stop()
	return nil
}

// Scale sets the number of consumers (handlers at once) of a group. A
// running group restarts its broker consumer with the new size: scaling
// blocks while what is in flight drains, up to the drain timeout; 0 is
// refused, and so is a size that would take the runtime past MaxConsumers.
func (r *Runtime) Scale(id string, n int) error {
	g, err := r.group(id)
	if err != nil {
		return err
	}
	// One scale at a time, so that two on different groups cannot each
	// find room for themselves and together pass the limit.
	r.scaleMu.Lock()
	defer r.scaleMu.Unlock()
	if n > 0 {
		others := 0
		for _, o := range r.groups {
			if o != g {
				// Sizes change only here, under scaleMu; the view does not
				// wait behind a group that is draining.
				others += o.view.Load().size
			}
		}
		// Compared without adding, which a size near the largest int
		// would wrap below the limit.
		if n > MaxConsumers-others {
			return fmt.Errorf("%w: consumer %q at %d would make more than the %d consumers one runtime runs; the most it can have now is %d",
				ErrTooManyConsumers, id, n, MaxConsumers, MaxConsumers-others)
		}
	}
	return g.scale(n)
}

// MaxConsumers bounds the consumers (handlers at once) of one runtime, all
// groups together. Each group consumes on a channel of its own (one broker
// consumer with the group's handlers), on the runtime's one consuming
// connection, and RabbitMQ allows a connection 2,047 channels by default
// (channel_max); past it, channel opens fail, over and over, for every group
// on the connection. Bounding the consumers bounds the groups, with the
// rest of the channels left for topology checks, and the handlers'
// goroutines with them.
const MaxConsumers = 2000

// ErrTooManyConsumers is returned when flows or a scale ask for more than
// MaxConsumers consumers.
var ErrTooManyConsumers = errors.New("too many consumers")

// checkConsumerCount refuses flows whose consumer groups add up to more
// than MaxConsumers.
func checkConsumerCount(pl *plan.Plan) error {
	d := TooManyConsumers(pl)
	if d == nil {
		return nil
	}
	return fmt.Errorf("%s: %w: %s; %s", d.Pos, ErrTooManyConsumers, d.Msg, d.Hint)
}

// TooManyConsumers is the diagnostic, at the largest group, of flows whose
// consumer groups add up to more consumers than one runtime runs
// (MaxConsumers), or nil. `validate` reports it; `run` refuses to start.
func TooManyConsumers(pl *plan.Plan) *spec.Diagnostic {
	total, biggest := 0, -1
	for i, c := range pl.Consumers {
		total += max(c.Concurrency, 1)
		if biggest < 0 || c.Concurrency > pl.Consumers[biggest].Concurrency {
			biggest = i
		}
	}
	if total <= MaxConsumers {
		return nil
	}
	c := pl.Consumers[biggest]
	return &spec.Diagnostic{Pos: c.At, Severity: spec.Error, Code: "too-many-consumers",
		Msg: fmt.Sprintf("the flows' concurrency adds up to %d consumers, more than the %d one runtime runs; the largest is consumer %q with %d",
			total, MaxConsumers, c.ID, c.Concurrency),
		Hint: "lower concurrency, or split the flows across runtimes"}
}

// Prefetch changes a group's prefetch, on its running consumers at once.
func (r *Runtime) Prefetch(id string, n int) error {
	g, err := r.group(id)
	if err != nil {
		return err
	}
	return g.setPrefetch(n)
}

// Pause stops every running consumer (each drained), remembering which, so
// that Resume starts them again: the tool for shedding load.
func (r *Runtime) Pause() error {
	if !r.running() {
		return ErrNotStarted
	}
	r.pauseMu.Lock()
	defer r.pauseMu.Unlock()
	var wg sync.WaitGroup
	for _, id := range r.order {
		g := r.groups[id]
		g.mu.Lock()
		running := g.state == StateRunning
		g.mu.Unlock()
		if running {
			r.paused = append(r.paused, id)
			wg.Go(g.stop)
		}
	}
	wg.Wait()
	r.log.Info("consuming paused", "consumers", len(r.paused))
	return nil
}

// Resume starts the consumers Pause stopped.
func (r *Runtime) Resume(ctx context.Context) error {
	if !r.running() {
		return ErrNotStarted
	}
	r.pauseMu.Lock()
	defer r.pauseMu.Unlock()
	var errs []error
	for _, id := range r.paused {
		if err := r.groups[id].start(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	r.log.Info("consuming resumed", "consumers", len(r.paused))
	r.paused = nil
	return errors.Join(errs...)
}
