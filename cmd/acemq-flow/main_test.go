package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/test/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// cli runs the command with args and returns stdout, stderr and the exit code.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

func golden(t *testing.T, file string, got []byte) {
	t.Helper()
	testenv.Golden(t, file, got, *update)
}

func TestValidateExitCodesAndFormats(t *testing.T) {
	bad := "../../spec/testdata/invalid/unknown-handler.yaml"
	cases := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"valid examples exit 0", []string{"validate", "../../examples/flows"}, 0, ""},
		{"an invalid flow exits 1 with file:line:col", []string{"validate", bad}, 1, "unknown-handler.yaml:9:18: error: step \"reserve\" uses handler \"stok.reserve\""},
		{"a warning alone exits 0", []string{"validate", "../../spec/testdata/invalid/saga-uncompensated.yaml"}, 0, "warning: saga step \"send-email\""},
		{"github annotations", []string{"validate", "--format", "github", bad}, 1, "::error file=../../spec/testdata/invalid/unknown-handler.yaml,line=9,col=18,title=acemq-flow unknown-handler::step"},
		{"an unknown format is a usage error", []string{"validate", "--format", "xml", bad}, 2, ""},
		{"an unknown flag is a usage error", []string{"validate", "--nope", bad}, 2, ""},
		{"no path is a usage error", []string{"validate"}, 2, ""},
		{"a missing path exits 1", []string{"validate", "does/not/exist.yaml"}, 1, "does/not/exist.yaml cannot be read"},
		{"a missing path's annotation has no line", []string{"validate", "--format", "github", "does/not/exist.yaml"}, 1, "::error file=does/not/exist.yaml,title=acemq-flow no-such-path::"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := cli(t, tc.args...)
			if code != tc.code {
				t.Errorf("acemq-flow %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.code, out, errOut)
			}
			if tc.contains != "" && !strings.Contains(out, tc.contains) {
				t.Errorf("acemq-flow %s: stdout lacks %q:\n%s", strings.Join(tc.args, " "), tc.contains, out)
			}
		})
	}
}

func TestValidateJSONIsOneDocument(t *testing.T) {
	out, _, code := cli(t, "validate", "--format", "json", "../../spec/testdata/invalid/type-flow.yaml")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	var doc struct {
		Diagnostics []map[string]any `json:"diagnostics"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("validate --format json printed invalid JSON: %v\n%s", err, out)
	}
	if len(doc.Diagnostics) != 2 {
		t.Fatalf("got %d diagnostics, want 2: %s", len(doc.Diagnostics), out)
	}
	for _, k := range []string{"file", "line", "col", "severity", "code", "message", "hint"} {
		if _, ok := doc.Diagnostics[0][k]; !ok {
			t.Errorf("diagnostic lacks %q: %v", k, doc.Diagnostics[0])
		}
	}
	out, _, code = cli(t, "validate", "--format", "json", "../../examples/flows")
	if code != 0 || strings.TrimSpace(out) != "{\n  \"diagnostics\": []\n}" {
		t.Errorf("valid flows: exit %d, output %q; want 0 and an empty list", code, out)
	}
}

// TestGraphGoldens draws every example flow in both formats.
func TestGraphGoldens(t *testing.T) {
	examples, _ := filepath.Glob("../../examples/flows/*.yaml")
	examples = slices.DeleteFunc(examples, func(p string) bool { return strings.HasSuffix(p, ".flowtest.yaml") }) // the flows' tests
	if len(examples) == 0 {
		t.Fatal("no example flows found")
	}
	for _, in := range examples {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		for format, ext := range map[string]string{"mermaid": "mmd", "dot": "dot"} {
			t.Run(name+"."+ext, func(t *testing.T) {
				out, errOut, code := cli(t, "graph", "--format", format, in)
				if code != 0 {
					t.Fatalf("graph %s: exit %d: %s", in, code, errOut)
				}
				golden(t, filepath.Join("testdata/graph", name+"."+ext+".golden"), []byte(out))
			})
		}
	}
}

func TestPlanPrintsDeclarationLineAndFullQueueNames(t *testing.T) {
	out, errOut, code := cli(t, "plan", "../../examples/flows/fulfilment.yaml")
	if code != 0 {
		t.Fatalf("plan: exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"pipeline fulfilment declared with 3 steps: validate | reserve (hold stock for 15 minutes so payment cannot oversell) | dispatch",
		"fulfilment.reserve.retry.1s", "fulfilment.reserve.dlq", "fulfilment.reserve.parked",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}
	_, _, code = cli(t, "plan", "../../spec/testdata/invalid/type-flow.yaml")
	if code != 1 {
		t.Errorf("plan of an invalid flow: exit %d, want 1", code)
	}
}

// TestValidateRefusesMoreConsumersThanARuntimeRuns: flows whose consumer
// groups add up to more than one runtime runs fail validate, in CI, not
// `run` at deploy time.
func TestValidateRefusesMoreConsumersThanARuntimeRuns(t *testing.T) {
	file := filepath.Join(t.TempDir(), "big.yaml")
	flow := "version: acemq.flow/v1\nname: big\nplugins:\n  k: {command: ./k}\npipelines:\n  - name: p\n    steps:\n" +
		"      - {name: a, handler: k.echo, concurrency: 1500}\n      - {name: b, handler: k.echo, concurrency: 600}\n"
	if err := os.WriteFile(file, []byte(flow), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code := cli(t, "validate", file)
	if code != 1 || !strings.Contains(out, "big.yaml:8:10: error: the flows' concurrency adds up to 2100 consumers") {
		t.Fatalf("validate = %d:\n%s\nwant exit 1 naming big.yaml:8:10 and the 2100 consumers", code, out)
	}
}

// TestRunRefusesTimeoutsThatAreNotPositive: a drain timeout or claim lease
// of zero or less is a usage error, not a runtime that drains nothing.
func TestRunRefusesTimeoutsThatAreNotPositive(t *testing.T) {
	for _, flag := range []string{"--drain-timeout=-1s", "--claim-timeout=0s"} {
		_, errOut, code := cli(t, "run", flag, "../../examples/flows/fulfilment.yaml")
		name := strings.SplitN(flag, "=", 2)[0]
		if code != 2 || !strings.Contains(errOut, name) || !strings.Contains(errOut, "must be positive") {
			t.Errorf("run %s = %d, %q; want exit 2 saying %s must be positive", flag, code, errOut, name)
		}
	}
}

// TestRunRefusesSagasInMemoryBeforeOpeningAnything: a flow with a saga is
// refused with memory:, which would lose its instances, naming the saga,
// before the broker or the store is opened.
func TestRunRefusesSagasInMemoryBeforeOpeningAnything(t *testing.T) {
	_, errOut, code := cli(t, "run", "--store", "memory:", "--amqp", "amqp://guest:guest@127.0.0.1:1/", "../../examples/flows/place-order.yaml")
	if code != 1 || !strings.Contains(errOut, `sagas ("place-order" first)`) || !strings.Contains(errOut, "memory: keeps nothing") || strings.Contains(errOut, "connect") {
		t.Errorf("run --store memory: place-order.yaml = %d, %q; want exit 1 naming the saga and memory:, before any connection", code, errOut)
	}
}
