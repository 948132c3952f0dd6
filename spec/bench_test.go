package spec_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// hundredFiles is 100 flow files of one 10-step pipeline each, with typed
// steps and a when expression per file.
func hundredFiles() fstest.MapFS {
	fsys := fstest.MapFS{}
	for i := range 100 {
		var b strings.Builder
		fmt.Fprintf(&b, "version: acemq.flow/v1\nname: flow-%d\nplugins:\n  p: {command: ./p}\n", i)
		b.WriteString("types:\n  Order: {type: object, required: [id], properties: {id: {type: string}, total: {type: number}}}\n")
		fmt.Fprintf(&b, "itineraries:\n  - name: it-%d\n    input: Order\n    stops:\n      - {name: a, exchange: x, routing_key: a, when: \"payload.total > 10\"}\n", i)
		fmt.Fprintf(&b, "pipelines:\n  - name: pipeline-%d\n    input: Order\n    steps:\n", i)
		for s := range 10 {
			fmt.Fprintf(&b, "      - {name: step-%d, handler: p.h%d, output: Order, retry: {max_attempts: 4}}\n", s, s)
		}
		fsys[fmt.Sprintf("flows/f%03d.yaml", i)] = &fstest.MapFile{Data: []byte(b.String())}
	}
	return fsys
}

// BenchmarkValidate100Files validates 100 files of 10 steps each, as
// `acemq-flow validate` does (Load, then Compile). The target is under a
// second for all of them.
func BenchmarkValidate100Files(b *testing.B) {
	fsys := hundredFiles()
	var total time.Duration
	for b.Loop() {
		start := time.Now()
		set, err := spec.Load(fsys, "flows")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := plan.Compile(set.Flows); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/100files")
	if b.N > 0 {
		fmt.Printf("bench: validate-100-files %d ms\n", (total / time.Duration(b.N)).Milliseconds())
	}
}
