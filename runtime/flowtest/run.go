package flowtest

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// Options configure Run.
type Options struct {
	// Call runs the real handlers instead of the cases' outcomes; nil
	// uses the outcomes.
	Call Call
}

// Result is one test file's outcome.
type Result struct {
	File  *File
	Diags spec.Diagnostics // the flows could not be loaded or compiled
	Cases []CaseResult
}

// CaseResult is one case's outcome: passed when Failures is empty.
type CaseResult struct {
	Case     *Case
	Failures []Failure
	Elapsed  time.Duration // wall time the case took
}

// Failed reports whether any case failed or the flows did not load.
func (r Result) Failed() bool {
	if r.Diags.HasErrors() {
		return true
	}
	for _, c := range r.Cases {
		if len(c.Failures) > 0 {
			return true
		}
	}
	return false
}

// LoadPlan loads and compiles the flows a test file tests.
func LoadPlan(f *File) (*plan.Plan, spec.Diagnostics) {
	set, err := spec.LoadPaths(spec.Options{}, f.Flows...)
	if err != nil {
		ds, ok := err.(spec.Diagnostics)
		if !ok {
			ds = spec.Diagnostics{{Pos: spec.Pos{File: f.Path}, Severity: spec.Error, Code: "load", Msg: err.Error()}}
		}
		return nil, ds
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		ds, ok := err.(spec.Diagnostics)
		if !ok {
			ds = spec.Diagnostics{{Pos: spec.Pos{File: f.Path}, Severity: spec.Error, Code: "compile", Msg: err.Error()}}
		}
		return nil, ds
	}
	return pl, nil
}

// Run runs every case of test file f.
func Run(ctx context.Context, f *File, opts Options) Result {
	res := Result{File: f}
	pl, ds := LoadPlan(f)
	if pl == nil {
		res.Diags = ds
		return res
	}
	for _, c := range f.Cases {
		res.Cases = append(res.Cases, RunCase(ctx, pl, f, c, opts))
	}
	return res
}

// RunCase runs one case of f against plan pl.
func RunCase(ctx context.Context, pl *plan.Plan, f *File, c *Case, opts Options) CaseResult {
	start := time.Now()
	s := newSim(pl, c, f.Start, opts.Call)
	out := CaseResult{Case: c}
	fail := func(pos spec.Pos, format string, args ...any) {
		out.Failures = append(out.Failures, Failure{Pos: pos, What: fmt.Sprintf(format, args...)})
	}
	if err := s.schedules(); err != nil {
		fail(c.Pos, "%v", err)
	}
	for _, st := range c.Steps {
		var err error
		switch {
		case st.Send != nil:
			if err = s.send(st.Send); err == nil {
				err = s.drain(ctx)
			}
		case st.Idle:
			err = s.untilIdle(ctx)
		case st.Advance > 0:
			err = s.advance(ctx, st.Advance)
		case st.Expect != nil:
			out.Failures = append(out.Failures, s.check(st.Expect, false)...)
		}
		if err != nil {
			fail(st.Pos, "%v", err)
			break
		}
	}
	if err := s.drain(ctx); err != nil {
		fail(c.Pos, "%v", err)
	}
	if c.Expect != nil {
		out.Failures = append(out.Failures, s.check(c.Expect, true)...)
	} else {
		out.Failures = append(out.Failures, s.check(&Expect{Pos: c.Pos}, true)...)
	}
	out.Elapsed = time.Since(start)
	return out
}
