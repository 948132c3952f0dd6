package reliability

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// cost runs f and returns how long it took and how many bytes it
// allocated; a panic in f fails the test.
func cost(t *testing.T, f func()) (time.Duration, uint64) {
	t.Helper()
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	start := time.Now()
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("panic: %v", r)
			}
		}()
		f()
	}()
	d := time.Since(start)
	goruntime.ReadMemStats(&after)
	return d, after.TotalAlloc - before.TotalAlloc
}

// TestChaosS21HostileFlowFiles loads workflow files built to hurt the
// loader: each is refused with an error, without a panic, and within a
// memory bound. The 50 MB file, binary garbage and 10 000 levels of
// nesting are spec's TestHostileInputGetsAnErrorNotAPanicOrAHang, and the
// fuzz corpus is spec's FuzzLoad (make test runs it); these are the
// shapes those leave out.
func TestChaosS21HostileFlowFiles(t *testing.T) {
	laughs := "version: acemq.flow/v1\nname: lol\nl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
	for i := 1; i <= 9; i++ {
		laughs += fmt.Sprintf("l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 9), ", "))
	}
	aliasPlugins := "version: acemq.flow/v1\nname: alias\nplugins:\n  p: &p {command: ./p}\n  q: *p\n"
	fiveMiB := "version: acemq.flow/v1\nname: big\ndescription: \"" + strings.Repeat("a", 5<<20) + "\"\n"
	cases := []struct {
		name     string
		data     string
		maxAlloc uint64
	}{
		{"a 9-level billion laughs (~300 bytes, 10^9 nodes expanded)", laughs, 10 << 20},
		{"duplicate keys", "version: acemq.flow/v1\nname: a\nname: b\n", 10 << 20},
		{"duplicate keys in a step", "version: acemq.flow/v1\nname: a\npipelines:\n  - name: p\n    steps:\n      - {name: s, name: t, handler: x.y}\n", 10 << 20},
		{"a 5 MiB file", fiveMiB, 200 << 20},
		{"ten thousand nested mappings", "version: acemq.flow/v1\nname: x\nx: " + strings.Repeat("{a: ", 10000) + "1" + strings.Repeat("}", 10000) + "\n", 200 << 20},
		{"a plugin written as an alias of another", aliasPlugins, 10 << 20},
	}
	var notes []string
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			d, alloc := cost(t, func() { _, err = spec.Load(fstest.MapFS{"f.yaml": {Data: []byte(tc.data)}}, "f.yaml") })
			var ds spec.Diagnostics
			if tc.name == "a plugin written as an alias of another" {
				// An alias that expands to a valid value is not hostile by
				// itself; what matters is that it is bounded.
				if err != nil && !errors.As(err, &ds) {
					t.Errorf("Load = %v, want diagnostics or nil", err)
				}
			} else if !errors.As(err, &ds) || !ds.HasErrors() {
				t.Errorf("Load = %v, want error diagnostics", err)
			}
			if alloc > tc.maxAlloc {
				t.Errorf("Load allocated %d MiB, want under %d MiB", alloc>>20, tc.maxAlloc>>20)
			}
			if d > 5*time.Second {
				t.Errorf("Load took %s; hostile input must be refused quickly", d)
			}
			notes = append(notes, fmt.Sprintf("%s: %s, %d KiB", tc.name, d.Round(time.Millisecond), alloc>>10))
		})
	}
	harness.Record(t, harness.Row{Scenario: "S21 hostile flow files", Faults: fmt.Sprintf("%d files", len(cases)), Notes: strings.Join(notes, "; ")})
}

// TestChaosS22HostileExpressions compiles and runs `when` expressions
// built to hurt: each is refused at compile time (node budget) or stops
// at run time (memory budget) with an error, never a panic, a hang or an
// unbounded allocation. The runaway 1..100000000 | filter(...) is spec's
// TestConditionsEvaluateOnPayloads.
func TestChaosS22HostileExpressions(t *testing.T) {
	deep := strings.Repeat("[", 5000) + "1" + strings.Repeat("]", 5000)
	cases := []struct {
		name, when string
		payload    string
		compile    bool // refused when the flow loads
		maxAlloc   uint64
	}{
		{"a 20 000-node expression", strings.Repeat("1 + ", 20000) + "1 > 0", `{}`, true, 64 << 20},
		{"a range of a billion mapped", "len(map(1..1000000000, # * 2)) > 0", `{}`, false, 64 << 20},
		{"nested ranges", "len(flatten(map(1..100000, 1..100000))) > 0", `{}`, false, 64 << 20},
		{"a string repeated a hundred million times", `len(repeat("a", 100000000)) > 0`, `{}`, false, 64 << 20},
		{"flatten on 5000 levels of nesting (CVE-2025-68156)", "len(flatten(payload.x)) > 0", `{"x": ` + deep + `}`, false, 64 << 20},
		{"max on 5000 levels of nesting (CVE-2025-68156)", "max(payload.x) > 0", `{"x": ` + deep + `}`, false, 64 << 20},
	}
	var notes []string
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			flow := fmt.Sprintf("version: acemq.flow/v1\nname: x\nitineraries:\n  - name: i\n    stops:\n      - {name: s, exchange: x, routing_key: k, when: %q}\n", tc.when)
			var set *spec.Set
			var err error
			d, alloc := cost(t, func() { set, err = spec.Load(fstest.MapFS{"f.yaml": {Data: []byte(flow)}}, "f.yaml") })
			if tc.compile {
				if err == nil {
					t.Fatalf("Load accepted %.40q…, want it refused at compile time", tc.when)
				}
				notes = append(notes, fmt.Sprintf("%s: refused at load, %s, %d KiB", tc.name, d.Round(time.Millisecond), alloc>>10))
				return
			}
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s: refused at load", tc.name))
				return
			}
			payload, derr := spec.DecodeJSON([]byte(tc.payload))
			if derr != nil {
				t.Fatal(derr)
			}
			var evalErr error
			d, alloc = cost(t, func() { _, evalErr = set.Flows[0].Itineraries[0].Stops[0].When.Eval(payload) })
			if evalErr == nil && !strings.Contains(tc.name, "CVE") {
				t.Errorf("when %q evaluated without an error, want the memory budget to stop it", tc.when)
			}
			if alloc > tc.maxAlloc {
				t.Errorf("when %q allocated %d MiB before it stopped, want under %d MiB", tc.when, alloc>>20, tc.maxAlloc>>20)
			}
			if d > 5*time.Second {
				t.Errorf("when %q ran %s before it stopped", tc.when, d)
			}
			notes = append(notes, fmt.Sprintf("%s: %v at run, %s, %d KiB", tc.name, evalErr != nil, d.Round(time.Millisecond), alloc>>10))
		})
	}
	harness.Record(t, harness.Row{Scenario: "S22 hostile expressions", Faults: fmt.Sprintf("%d expressions", len(cases)), Notes: strings.Join(notes, "; ")})
}
