package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/acemq/acemq-flow/plugins/host"
	"github.com/acemq/acemq-flow/runtime/hostcall"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// CheckPlugins starts every plugin the plan names (one process per distinct
// command, args, env and folder), asks each which handlers it serves, stops
// it, and reports every handler the flows use that is missing or whose
// declared types disagree with the flow's (`validate --plugins`).
func CheckPlugins(ctx context.Context, pl *plan.Plan) spec.Diagnostics {
	var ds spec.Diagnostics
	type served struct {
		handlers map[string]host.HandlerInfo
		err      error
	}
	byFlowPlugin := map[string]*served{}
	byKey := map[string]*served{}
	for _, p := range pl.Plugins {
		if s, ok := byKey[hostcall.Key(p)]; ok {
			byFlowPlugin[p.File+"\x00"+p.Name] = s
			continue
		}
		s := &served{handlers: map[string]host.HandlerInfo{}}
		byFlowPlugin[p.File+"\x00"+p.Name] = s
		byKey[hostcall.Key(p)] = s
		started, err := host.Start(ctx, hostcall.Config(p, slog.New(slog.DiscardHandler)))
		if err != nil {
			s.err = err
			ds = append(ds, spec.Diagnostic{Pos: p.At, Severity: spec.Error, Code: "plugin-start",
				Msg: fmt.Sprintf("plugin %q does not start: %v", p.Name, err), Hint: "build it (make build) or fix its command"})
			continue
		}
		for _, h := range started.Handlers() {
			s.handlers[h.Name] = h
		}
		_ = started.Close()
	}
	check := func(at spec.Pos, flowFile, ref, input, output, what string) {
		plugin, handler, _ := strings.Cut(ref, ".")
		s := byFlowPlugin[flowFile+"\x00"+plugin]
		if s == nil || s.err != nil {
			return
		}
		h, ok := s.handlers[handler]
		if !ok {
			ds = append(ds, spec.Diagnostic{Pos: at, Severity: spec.Error, Code: "missing-handler",
				Msg:  fmt.Sprintf("%s uses handler %q, but plugin %q serves no handler %q", what, ref, plugin, handler),
				Hint: "it serves " + strings.Join(slices.Sorted(maps.Keys(s.handlers)), ", ")})
			return
		}
		if h.InputType != "" && input != "" && h.InputType != input {
			ds = append(ds, spec.Diagnostic{Pos: at, Severity: spec.Error, Code: "handler-type",
				Msg:  fmt.Sprintf("%s takes %s, but handler %q declares input %s", what, input, ref, h.InputType),
				Hint: "make the flow's type and the handler's agree"})
		}
		if h.OutputType != "" && output != "" && h.OutputType != output {
			ds = append(ds, spec.Diagnostic{Pos: at, Severity: spec.Error, Code: "handler-type",
				Msg:  fmt.Sprintf("%s outputs %s, but handler %q declares output %s", what, output, ref, h.OutputType),
				Hint: "make the flow's type and the handler's agree"})
		}
	}
	for _, c := range pl.Consumers {
		what := fmt.Sprintf("consumer %q", c.ID)
		switch {
		case c.Handler == "":
			continue // a saga's timeout: no handler
		case c.Saga != "" && c.Compensate:
			// A compensation gets the saga's input, and returns nothing
			// anyone reads.
			check(c.At, c.File.File, c.Handler, c.Input, "", fmt.Sprintf("saga %q step %q compensation", c.Saga, c.Step))
			continue
		case c.Saga != "":
			what = fmt.Sprintf("saga %q step %q", c.Saga, c.Step)
		}
		check(c.At, c.File.File, c.Handler, c.Input, c.Output, what)
	}
	ds.Sort()
	return ds
}
