package flowtest

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/plugins/host"
	"github.com/acemq/acemq-flow/runtime/decide"
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

func (ps *Plugins) pluginOf(c *plan.Consumer) (plan.Plugin, bool) {
	for _, p := range ps.pl.Plugins {
		if p.Name == c.Plugin && c.File != nil && p.File == c.File.File {
			return p, true
		}
	}
	return plan.Plugin{}, false
}

func pluginKey(p plan.Plugin) string {
	var b strings.Builder
	b.WriteString(p.Path + "\x02" + p.Dir)
	for _, a := range p.Args {
		b.WriteString("\x00" + a)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		b.WriteString("\x01" + k + "=" + p.Env[k])
	}
	return b.String()
}

// Call is how the harness calls a consumer's handler in its plugin.
func (ps *Plugins) Call(ctx context.Context, c *plan.Consumer, env decide.Envelope, payload []byte, compensate bool, stepOutput []byte) (decide.Result, error) {
	if c.Handler == "" {
		return decide.Result{}, fmt.Errorf("%w: consumer %q has no handler to call", decide.ErrFatal, c.ID)
	}
	p, ok := ps.pluginOf(c)
	if !ok {
		return decide.Result{}, fmt.Errorf("%w: consumer %q: plugin %q is not declared in its flow file", decide.ErrFatal, c.ID, c.Plugin)
	}
	ps.mu.Lock()
	hp := ps.started[pluginKey(p)]
	if hp == nil {
		var err error
		hp, err = host.Start(ctx, host.Config{Name: p.Name, Command: p.Path, Dir: p.Dir, Args: p.Args, Env: p.Env, SHA256: p.SHA256,
			Timeout: time.Duration(p.Timeout), Logger: ps.log})
		if err != nil {
			ps.mu.Unlock()
			return decide.Result{}, fmt.Errorf("%w: plugin %q (%s) could not be started: %w; build it (make build) or run without --plugins", decide.ErrFatal, p.Name, p.At, err)
		}
		ps.started[pluginKey(p)] = hp
	}
	ps.mu.Unlock()
	_, handler, _ := strings.Cut(c.Handler, ".")
	h := make(map[string]string, len(env.Headers))
	for k, v := range env.Headers {
		if strings.HasPrefix(k, plan.HeaderPrefix) || k == plan.HeaderSlip {
			continue
		}
		h[k] = decide.HeaderText(v)
	}
	res, err := hp.Call(ctx, host.Request{Handler: handler, Payload: payload, Compensate: compensate, StepOutput: stepOutput,
		Envelope: host.Envelope{MessageID: env.MessageID, Type: env.Type, CorrelationID: decide.RunID(env), CausationID: env.CausationID,
			Origin: env.Origin, Attempt: env.Attempt, FirstSeen: env.FirstSeen, Headers: h, Queue: c.Queue}})
	if err != nil {
		if host.IsFatal(err) {
			return decide.Result{}, fmt.Errorf("%w: %w", decide.ErrFatal, err)
		}
		return decide.Result{}, err
	}
	return decide.Result{Stop: res.Stop, Payload: res.Payload}, nil
}
