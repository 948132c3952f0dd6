package flowtest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/acemq/acemq-flow/plugins/host"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/hostcall"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// Plugins runs the real plugin binaries of a plan (--plugins): each is
// started through plugins/host on its first call, one process per
// distinct command, args, env and folder, as the runtime starts them.
type Plugins struct {
	pl      *plan.Plan
	log     *slog.Logger
	mu      sync.Mutex
	started map[string]*host.Plugin
}

// NewPlugins is the plugins of pl, none started yet; log receives their
// lifecycle and stderr (nil discards).
func NewPlugins(pl *plan.Plan, log *slog.Logger) *Plugins {
	return &Plugins{pl: pl, log: log, started: map[string]*host.Plugin{}}
}

// Close stops every plugin started.
func (ps *Plugins) Close() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var first error
	for _, p := range ps.started {
		if err := p.Close(); err != nil && first == nil {
			first = err
		}
	}
	ps.started = map[string]*host.Plugin{}
	return first
}

// Call is how the harness calls a consumer's handler in its plugin.
func (ps *Plugins) Call(ctx context.Context, c *plan.Consumer, env decide.Envelope, payload []byte, compensate bool, stepOutput []byte) (decide.Result, error) {
	if c.Handler == "" {
		return decide.Result{}, fmt.Errorf("%w: consumer %q has no handler to call", decide.ErrFatal, c.ID)
	}
	p, ok := hostcall.PluginOf(ps.pl, c)
	if !ok {
		return decide.Result{}, fmt.Errorf("%w: consumer %q: plugin %q is not declared in its flow file", decide.ErrFatal, c.ID, c.Plugin)
	}
	ps.mu.Lock()
	key := hostcall.Key(p)
	hp := ps.started[key]
	if hp == nil {
		var err error
		hp, err = host.Start(ctx, hostcall.Config(p, ps.log))
		if err != nil {
			ps.mu.Unlock()
			return decide.Result{}, fmt.Errorf("%w: plugin %q (%s) could not be started: %w; build it (make build) or run without --plugins", decide.ErrFatal, p.Name, p.At, err)
		}
		ps.started[key] = hp
	}
	ps.mu.Unlock()
	return hostcall.Call(ctx, hp, hostcall.Request{Handler: c.Handler, Envelope: env, Payload: payload, Queue: c.Queue,
		Compensate: compensate, StepOutput: stepOutput})
}
