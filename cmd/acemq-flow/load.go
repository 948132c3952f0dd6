package main

import (
	"fmt"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// loadAndCompile loads flows from OS paths and compiles their plan. Errors
// and warnings come back as diagnostics; notices go to stderr.
func loadAndCompile(io streams, paths []string) (*spec.Set, *plan.Plan, spec.Diagnostics) {
	set, err := spec.LoadPaths(spec.Options{}, paths...)
	var diags spec.Diagnostics
	if set != nil {
		for _, n := range set.Notices {
			fmt.Fprintln(io.err, n)
		}
		diags = append(diags, set.Warnings...)
	}
	if err != nil {
		ds, ok := err.(spec.Diagnostics)
		if !ok {
			ds = spec.Diagnostics{{Severity: spec.Error, Code: "load", Msg: err.Error()}}
		}
		return set, nil, mergeDiags(diags, ds)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		ds, ok := err.(spec.Diagnostics)
		if !ok {
			ds = spec.Diagnostics{{Severity: spec.Error, Code: "compile", Msg: err.Error()}}
		}
		return set, nil, mergeDiags(diags, ds)
	}
	if d := runtime.TooManyConsumers(pl); d != nil {
		return set, nil, mergeDiags(diags, spec.Diagnostics{*d})
	}
	return set, pl, diags
}

func mergeDiags(a, b spec.Diagnostics) spec.Diagnostics {
	seen := map[string]bool{}
	var out spec.Diagnostics
	for _, d := range append(a, b...) {
		k := d.String()
		if !seen[k] {
			seen[k] = true
			out = append(out, d)
		}
	}
	out.Sort()
	return out
}
