package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrUnknownConsumer is returned for a consumer id no flow declares.
var ErrUnknownConsumer = errors.New("no such consumer")

func (r *Runtime) group(id string) (*group, error) {
	g, ok := r.groups[id]
	if !ok || !r.running() {
		return nil, fmt.Errorf("%w %q; `acemq-flow consumers list` shows the ids", ErrUnknownConsumer, id)
	}
	return g, nil
}

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
		return err
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

// Scale sets the number of consumers of a group. Scaling down blocks while
// the removed consumers drain; 0 is refused.
func (r *Runtime) Scale(id string, n int) error {
	g, err := r.group(id)
	if err != nil {
		return err
	}
	return g.scale(n)
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
func (r *Runtime) Pause() {
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
}

// Resume starts the consumers Pause stopped.
func (r *Runtime) Resume(ctx context.Context) error {
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
