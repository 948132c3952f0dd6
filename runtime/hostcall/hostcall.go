// Package hostcall is a step's call to its handler in a plugin, as the
// engine and the flow-test harness (`acemq-flow test --plugins`) both make
// it: which of the plan's plugins serves a consumer, which process runs it
// (one per distinct command, args, env and folder), the plugin host's
// configuration, and the call: decide's envelope as plugins/host's request,
// the plugin's answer as decide's result, a fatal failure as
// decide.ErrFatal. It imports plan, decide and plugins/host, never the
// engine, the broker or a store.
package hostcall

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/plugins/host"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// PluginOf returns the plugin of pl that serves consumer c: the one its
// flow file declares under the name its handler starts with.
func PluginOf(pl *plan.Plan, c *plan.Consumer) (plan.Plugin, bool) {
	for _, p := range pl.Plugins {
		if p.Name == c.Plugin && c.File != nil && p.File == c.File.File {
			return p, true
		}
	}
	return plan.Plugin{}, false
}

// Key names the process that runs plugin p: plugins declared alike (the
// same command, folder, args and env) share one.
func Key(p plan.Plugin) string {
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

// Config is the plugin host's configuration for p, logging to log.
func Config(p plan.Plugin, log *slog.Logger) host.Config {
	return host.Config{Name: p.Name, Command: p.Path, Dir: p.Dir, Args: p.Args, Env: p.Env, SHA256: p.SHA256,
		Timeout: time.Duration(p.Timeout), Logger: log}
}

// Handler is the name inside its plugin of handler name: "reserve" for
// "stock.reserve".
func Handler(name string) string {
	_, h, _ := strings.Cut(name, ".")
	return h
}

// Caller is a started plugin (*host.Plugin).
type Caller interface {
	Call(ctx context.Context, req host.Request) (host.Result, error)
}

// Request is one call of a handler: one message. The engine's in-process
// handlers get it too (runtime.Request).
type Request struct {
	Handler  string // "<plugin>.<handler>"
	Envelope decide.Envelope
	Payload  []byte
	// Queue is the queue the message was consumed from, ReceivedAt when
	// the runtime received the delivery.
	Queue      string
	ReceivedAt time.Time
	// Compensate is true for a saga step's compensation; StepOutput is
	// then what the compensated step returned (nil otherwise).
	Compensate bool
	StepOutput []byte
}

// Call calls req's handler through p, the plugin that serves it. The
// handler sees the envelope's headers but for the runtime's own
// (x-acemq-*, the routing slip). A failure the plugin reports as fatal
// wraps decide.ErrFatal; any other is retryable.
func Call(ctx context.Context, p Caller, req Request) (decide.Result, error) {
	e := req.Envelope
	var h map[string]string // none, without an allocation, when only the runtime's are there
	for k, v := range e.Headers {
		if strings.HasPrefix(k, plan.HeaderPrefix) || k == plan.HeaderSlip {
			continue
		}
		if h == nil {
			h = make(map[string]string, len(e.Headers))
		}
		h[k] = decide.HeaderText(v)
	}
	env := host.Envelope{MessageID: e.MessageID, Type: e.Type, CorrelationID: decide.RunID(e), CausationID: e.CausationID,
		Origin: e.Origin, Attempt: e.Attempt, FirstSeen: e.FirstSeen, Headers: h, Queue: req.Queue, ReceivedAt: req.ReceivedAt}
	res, err := p.Call(ctx, host.Request{Handler: Handler(req.Handler), Payload: req.Payload, Envelope: env,
		Compensate: req.Compensate, StepOutput: req.StepOutput})
	if err != nil {
		if host.IsFatal(err) {
			return decide.Result{}, fmt.Errorf("%w: %w", decide.ErrFatal, err)
		}
		return decide.Result{}, err
	}
	return decide.Result{Stop: res.Stop, Payload: res.Payload}, nil
}
