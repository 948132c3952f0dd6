package main

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExampleFlowTests runs every example flow's tests, as `make test`
// does: each must pass.
func TestExampleFlowTests(t *testing.T) {
	out, errb, code := cli(t, "test", "../../examples/flows")
	if code != 0 {
		t.Fatalf("test ../../examples/flows: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	if out != "" {
		t.Errorf("test ../../examples/flows: stdout = %q, want nothing when every case passes", out)
	}
	if !strings.Contains(errb, " 0 failed") {
		t.Errorf("test ../../examples/flows: stderr = %q, want the count of cases with 0 failed", errb)
	}
}

const failingTests = "testdata/flowtest/failing"

func TestFlowTestFailuresPointAtTheExpectation(t *testing.T) {
	out, _, code := cli(t, "test", failingTests)
	if code != 1 {
		t.Fatalf("test %s: exit %d, want 1", failingTests, code)
	}
	golden(t, "testdata/flowtest/failing.text.golden", []byte(out))
}

func TestFlowTestFormats(t *testing.T) {
	t.Run("json holds the diagnostics and each case", func(t *testing.T) {
		out, _, code := cli(t, "test", "--format", "json", failingTests)
		if code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		var doc struct {
			Diagnostics []struct {
				File    string `json:"file"`
				Line    int    `json:"line"`
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"diagnostics"`
			Cases []struct {
				Name   string `json:"name"`
				Passed bool   `json:"passed"`
			} `json:"cases"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("test --format json: %v\n%s", err, out)
		}
		if len(doc.Diagnostics) != 3 || doc.Diagnostics[0].Line != 19 || doc.Diagnostics[0].Code != "flowtest-failed" {
			t.Errorf("test --format json: diagnostics = %+v, want 3, the first at line 19 with code flowtest-failed", doc.Diagnostics)
		}
		if len(doc.Cases) != 3 || !doc.Cases[0].Passed || doc.Cases[1].Passed {
			t.Errorf("test --format json: cases = %+v, want 3, the first passed and the second failed", doc.Cases)
		}
	})
	t.Run("junit has a failure per failing case", func(t *testing.T) {
		out, _, code := cli(t, "test", "--format", "junit", failingTests)
		if code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		var doc junitSuites
		if err := xml.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("test --format junit: %v\n%s", err, out)
		}
		if len(doc.Suites) != 1 || doc.Suites[0].Tests != 3 || doc.Suites[0].Failures != 2 {
			t.Fatalf("test --format junit: suites = %+v, want one with 3 tests and 2 failures", doc.Suites)
		}
		if f := doc.Suites[0].Cases[1].Failure; f == nil || !strings.Contains(f.Text, "failing.flowtest.yaml:19:14") {
			t.Errorf("test --format junit: second case's failure = %+v, want the diagnostic at failing.flowtest.yaml:19:14", f)
		}
	})
	t.Run("github annotates the expectation", func(t *testing.T) {
		out, _, _ := cli(t, "test", "--format", "github", failingTests)
		if !strings.HasPrefix(out, "::error file=testdata/flowtest/failing/failing.flowtest.yaml,line=19,col=14,") {
			t.Errorf("test --format github: %q, want an ::error annotation at line 19, col 14", out)
		}
	})
	t.Run("an unknown format is a usage error", func(t *testing.T) {
		if _, _, code := cli(t, "test", "--format", "xml", failingTests); code != 2 {
			t.Errorf("test --format xml: exit %d, want 2", code)
		}
	})
	t.Run("testdata is searched only when named", func(t *testing.T) {
		if _, errb, code := cli(t, "test", "testdata"); code != 1 || !strings.Contains(errb, "2 failed") {
			t.Errorf("test testdata: exit %d, stderr %q; want exit 1 and the failing file found when testdata is named", code, errb)
		}
		if out, _, code := cli(t, "test", "."); code != 1 || !strings.Contains(out, "no test files found") {
			t.Errorf("test .: exit %d, stdout %q; want exit 1 with no test files found, testdata left out", code, out)
		}
	})
	t.Run("a path without test files fails", func(t *testing.T) {
		if _, _, code := cli(t, "test", t.TempDir()); code != 1 {
			t.Errorf("test EMPTY-FOLDER: exit %d, want 1", code)
		}
	})
}

// TestFlowTestUpdate: --update writes what happened where the expected
// lists differ, and leaves the rest of the file as it was; the file then
// passes but for the dead letter no list names.
func TestFlowTestUpdate(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"flow.yaml", "failing.flowtest.yaml"} {
		data, err := os.ReadFile(filepath.Join(failingTests, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, errb, code := cli(t, "test", "--update", dir); !strings.Contains(errb, "rewrote 2 expected list(s)") || code != 1 {
		t.Fatalf("test --update: exit %d, stderr = %q; want 2 lists rewritten, and exit 1 for the dead letter it cannot write", code, errb)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "failing.flowtest.yaml"))
	for _, want := range []string{"route: [first, second]\n", "        - {queue: tiny.second, attempt: 2, delay: 5s}\n", "    expect:\n      route: [first, second]\n      outputs: {tiny.second: [{n: 1}]}\n"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("test --update: the file lacks %q:\n%s", want, got)
		}
	}
	out, _, code := cli(t, "test", dir)
	if code != 1 || strings.Count(out, "error:") != 1 || !strings.Contains(out, "dead letters") {
		t.Errorf("test after --update: exit %d, stdout %q; want exit 1 with the unexpected dead letter only", code, out)
	}
}
