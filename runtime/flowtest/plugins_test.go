package flowtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/acemq/acemq-flow/test/testenv"
)

// TestRealPlugins runs a case with the testkit plugin's real process
// (--plugins) instead of the case's outcomes: its flaky handler fails the
// first two attempts, its fatal handler dead-letters, and the harness sees
// both as the runtime would.
func TestRealPlugins(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the testkit plugin")
	}
	dir := t.TempDir()
	testenv.GoBuild(t, dir, "./examples/plugins/testkit")
	flow := `version: acemq.flow/v1
name: real
plugins:
  kit: {command: ./testkit, timeout: 5s}
pipelines:
  - name: p
    steps:
      - {name: a, handler: kit.echo}
      - {name: b, handler: kit.flaky, retry: {max_attempts: 5, initial_delay: 1s, max_delay: 1m, jitter: 0}}
      - {name: c, handler: kit.fatal}
`
	test := `version: acemq.flowtest/v1
cases:
  - name: the real plugin's outcomes
    handlers: {kit.fatal: echo}   # not used: the plugin answers
    steps:
      - send: {pipeline: p, payload: {fail_attempts: 2}}
      - run: until_idle
    expect:
      route: [a, b]
      retries:
        - {queue: p.b, attempt: 2, delay: 1s}
        - {queue: p.b, attempt: 3, delay: 2s}
      dead_letters: [{queue: p.c.dlq, kind: fatal, error: "testkit: fatal"}]
`
	if err := os.WriteFile(filepath.Join(dir, "f.yaml"), []byte(flow), 0o644); err != nil {
		t.Fatal(err)
	}
	f, ds := Parse(filepath.Join(dir, "real.flowtest.yaml"), []byte(test))
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	pl, ds := LoadPlan(f)
	if pl == nil {
		t.Fatal(ds)
	}
	ps := NewPlugins(pl, nil)
	t.Cleanup(func() { _ = ps.Close() })
	r := RunCase(t.Context(), pl, f, f.Cases[0], Options{Call: ps.Call})
	for _, fl := range r.Failures {
		t.Errorf("%s: %s", fl.Pos, fl.Message())
	}
}
