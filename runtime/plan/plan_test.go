package plan_test

import (
	"bytes"
	"flag"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func compile(t *testing.T, paths ...string) *plan.Plan {
	t.Helper()
	set, err := spec.LoadPaths(spec.Options{Env: func(string) (string, bool) { return "", false }}, paths...)
	if err != nil {
		t.Fatalf("Load(%v): %v", paths, err)
	}
	p, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatalf("Compile(%v): %v", paths, err)
	}
	return p
}

func golden(t *testing.T, file string, got []byte) {
	t.Helper()
	testenv.Golden(t, file, got, *update)
}

// TestPlanGoldens compiles every flow under testdata and every example
// flow, and compares `plan` text and json output with the golden files.
func TestPlanGoldens(t *testing.T) {
	inputs, _ := filepath.Glob("testdata/*.yaml")
	examples, _ := filepath.Glob("../../examples/flows/*.yaml")
	examples = slices.DeleteFunc(examples, func(p string) bool { return strings.HasSuffix(p, ".flowtest.yaml") })
	for _, in := range append(inputs, examples...) {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			p := compile(t, in)
			var text, js bytes.Buffer
			if err := p.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if err := p.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			again := compile(t, in)
			var js2 bytes.Buffer
			_ = again.WriteJSON(&js2)
			if !bytes.Equal(js.Bytes(), js2.Bytes()) {
				t.Errorf("Compile(%s) twice gave different plans", in)
			}
			golden(t, filepath.Join("testdata", name+".plan.golden"), text.Bytes())
			golden(t, filepath.Join("testdata", name+".json.golden"), js.Bytes())
		})
	}
}

func TestRetryLadderArithmetic(t *testing.T) {
	p := compile(t, "testdata/retry-ladder.yaml")
	byID := map[string]plan.Consumer{}
	for _, c := range p.Consumers {
		byID[c.ID] = c
	}
	cases := []struct {
		name     string
		consumer string
		want     []time.Duration
	}{
		{"delays double from initial_delay and stop at max_delay", "billing.charge", []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}},
		{"max_attempts 1 means no retry", "billing.notify", nil},
		{"a consumer's own retry wins over defaults", "audit", []time.Duration{90 * time.Second, 180 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := byID[tc.consumer]
			var got []time.Duration
			for i, r := range c.Retry.Rungs {
				got = append(got, time.Duration(r.Delay))
				if r.Attempt != i+2 {
					t.Errorf("rung %d is before attempt %d, want %d", i, r.Attempt, i+2)
				}
				if r.Queue != plan.RetryQueue(c.Queue, time.Duration(r.Delay)) {
					t.Errorf("rung %d queue %s, want %s", i, r.Queue, plan.RetryQueue(c.Queue, time.Duration(r.Delay)))
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Compile(retry-ladder.yaml): %s rungs = %v, want %v", tc.consumer, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("Compile(retry-ladder.yaml): %s rung %d delay = %s, want %s", tc.consumer, i+1, got[i], tc.want[i])
				}
			}
			if _, ok := c.Retry.RungFor(len(tc.want) + 1); ok {
				t.Errorf("RungFor(%d) found a rung; attempts should be exhausted", len(tc.want)+1)
			}
		})
	}
	queues := map[string]plan.Queue{}
	for _, q := range p.Queues {
		queues[q.Name] = q
	}
	for _, name := range []string{"billing.charge.retry.1s", "billing.charge.dlq", "billing.charge.parked", "audit.log.retry.90s", "audit.log.retry.3m", "audit.log.dlq"} {
		if _, ok := queues[name]; !ok {
			t.Errorf("plan lacks queue %s", name)
		}
	}
	if q := queues["billing.charge"]; q.Arguments["x-delivery-limit"] != int64(20) || q.Arguments["x-dead-letter-strategy"] != "at-least-once" || q.Arguments["x-overflow"] != "reject-publish" {
		t.Errorf("quorum step queue arguments %v lack the explicit delivery limit and at-least-once dead-lettering", q.Arguments)
	}
	if q := queues["audit.log"]; q.Arguments["x-message-ttl"] != int64(60000) || q.Arguments["x-dead-letter-exchange"] != plan.DeadLetterExchange {
		t.Errorf("declared classic queue arguments %v, want the ttl and dead_letter's exchange", q.Arguments)
	}
	if q := queues["billing.charge.retry.2s"]; q.Arguments["x-message-ttl"] != int64(2000) || q.Arguments["x-dead-letter-routing-key"] != "billing.charge" || q.Arguments["x-dead-letter-exchange"] != "" {
		t.Errorf("rung arguments %v, want a 2000 ms TTL dead-lettering to billing.charge through the default exchange", q.Arguments)
	}
	if q := queues["billing.charge.dlq"]; q.Type != "classic" || q.Arguments["x-delivery-limit"] != nil {
		t.Errorf(".dlq is %s with %v; want a classic queue with no delivery limit", q.Type, q.Arguments)
	}
}

// TestNamesTheBrokerWouldRefuseAreErrors: a declared queue or exchange name
// over AMQP's 255 bytes, or starting with amq., fails the compile (so
// validate), naming it, rather than the declare at start.
func TestNamesTheBrokerWouldRefuseAreErrors(t *testing.T) {
	long := strings.Repeat("s", 200)
	set, err := spec.Load(testenv.FlowFS(`version: acemq.flow/v1
name: names
plugins:
  k: {command: ./k}
pipelines:
  - name: amq.orders
    steps:
      - {name: a, handler: k.a}
  - name: `+long+`
    steps:
      - {name: `+long+`, handler: k.a}
`), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = plan.Compile(set.Flows)
	ds, ok := err.(spec.Diagnostics)
	if !ok {
		t.Fatalf("Compile = %v, want diagnostics", err)
	}
	codes := map[string]int{}
	for _, d := range ds {
		codes[d.Code]++
	}
	if codes["reserved-name"] == 0 || codes["name-too-long"] == 0 {
		t.Errorf("Compile diagnostics %v; want reserved-name for amq.orders and name-too-long for the long step's queues:\n%s", codes, ds.Error())
	}
}
