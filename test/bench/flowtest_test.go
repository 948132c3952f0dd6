package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/flowtest"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// flowtestCases is how many cases the flowtest-100-cases figure runs.
const flowtestCases = 100

// BenchmarkFlowTest100Cases: 100 flow-test cases, the examples' cases in
// turn, each on a simulated broker and clock of its own, from reading the
// test files and compiling their flows to the last expectation checked
// (DESIGN.md: under 1,000 ms). The median of five rounds after a warm-up.
func BenchmarkFlowTest100Cases(b *testing.B) {
	if only := os.Getenv("ACEMQ_BENCH_ONLY"); only != "" && only != "flowtest-100-cases" {
		b.Skip("ACEMQ_BENCH_ONLY=" + only)
	}
	round := func() time.Duration {
		start := time.Now()
		files, ds := flowtest.Load("../../examples/flows")
		if len(ds) > 0 {
			b.Fatal(ds)
		}
		plans := make([]*plan.Plan, len(files))
		for i, f := range files {
			pl, ds := flowtest.LoadPlan(f)
			if pl == nil {
				b.Fatal(ds)
			}
			plans[i] = pl
		}
		ran := 0
		for ran < flowtestCases {
			for i, f := range files {
				for _, c := range f.Cases {
					if ran == flowtestCases {
						break
					}
					if r := flowtest.RunCase(context.Background(), plans[i], f, c, flowtest.Options{}); len(r.Failures) > 0 {
						b.Fatalf("%s: case %q failed: %s", f.Path, c.Name, r.Failures[0].Message())
					}
					ran++
				}
			}
		}
		return time.Since(start)
	}
	round() // warm-up
	var ms []float64
	for r := 1; r <= 5; r++ {
		d := round()
		ms = append(ms, float64(d.Microseconds())/1000)
		if verbose {
			fmt.Printf("bench: round %d flowtest-100-cases %.1f ms\n", r, ms[len(ms)-1])
		}
	}
	fmt.Printf("bench: flowtest-100-cases %.0f ms\n", median(ms))
}
