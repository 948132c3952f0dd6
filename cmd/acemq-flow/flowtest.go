package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime/flowtest"
	"github.com/acemq/acemq-flow/spec"
)

func newTestCmd(io streams) *cobra.Command {
	var format string
	var plugins, update bool
	cmd := &cobra.Command{
		Use:   "test [--format text|json|github|junit] [--update] [--plugins] [PATH...]",
		Short: "Run flow tests (*.flowtest.yaml) on a simulated broker and a virtual clock",
		Long: `Run the flow tests in each PATH (a *.flowtest.yaml file, or a folder
searched for them; the current folder by default; folders named testdata or starting
with a dot are searched only when named) with the runtime's own
decision code, a simulated broker and a virtual clock: retries, delays,
saga timeouts and schedules fire without waiting. Needs no broker, no
database and no plugin binary; --plugins calls the real plugins instead
of the outcomes the cases give. Each failing expectation is reported at
its file:line:col with what was expected and what happened; --update
rewrites the expected lists with what happened. Exit 0 when every case
passes, 1 when any fails or a file is invalid, 2 on usage errors.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, ok := testRenderers[format]; !ok {
				return usage("--format must be text, json, github or junit, not %q", format)
			}
			if len(args) == 0 {
				args = []string{"."}
			}
			files, diags := flowtest.Load(args...)
			var results []flowtest.Result
			for _, f := range files {
				var opts flowtest.Options
				var ps *flowtest.Plugins
				if plugins {
					pl, ds := flowtest.LoadPlan(f)
					if pl == nil {
						results = append(results, flowtest.Result{File: f, Diags: ds})
						continue
					}
					ps = flowtest.NewPlugins(pl, slog.New(slog.NewTextHandler(io.err, &slog.HandlerOptions{Level: slog.LevelWarn})))
					opts.Call = ps.Call
				}
				r := flowtest.Run(cmd.Context(), f, opts)
				if ps != nil {
					_ = ps.Close()
				}
				results = append(results, r)
				if update {
					var fs []flowtest.Failure
					for _, c := range r.Cases {
						fs = append(fs, c.Failures...)
					}
					n, err := flowtest.WriteUpdate(f, fs)
					if err != nil {
						return failed("--update: write %s: %w", f.Path, err)
					}
					if n > 0 {
						fmt.Fprintf(io.err, "%s: rewrote %d expected list(s) with what happened; review the change\n", f.Path, n)
					}
				}
			}
			if err := testRenderers[format](io.out, diags, results, update); err != nil {
				return failed("write results: %w", err)
			}
			passed, failedN := 0, 0
			bad := diags.HasErrors()
			for _, r := range results {
				bad = bad || r.Diags.HasErrors()
				for _, c := range r.Cases {
					if len(c.Failures) == 0 {
						passed++
						continue
					}
					failedN++
					for _, f := range c.Failures {
						// --update cannot write this one (a dead letter no
						// list names): it still fails.
						bad = bad || !f.Updatable()
					}
				}
			}
			if format == "text" {
				fmt.Fprintf(io.err, "%d case(s) passed, %d failed, in %d file(s)\n", passed, failedN, len(results))
			}
			if bad || (failedN > 0 && !update) {
				return silent1
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text, json, github or junit")
	cmd.Flags().BoolVar(&update, "update", false, "rewrite the expected lists that differ with what happened")
	cmd.Flags().BoolVar(&plugins, "plugins", false, "call the flows' real plugins instead of the outcomes the cases give")
	return cmd
}

// testDiags is every failure of results as a diagnostic at the
// expectation, after the files' own.
func testDiags(diags spec.Diagnostics, results []flowtest.Result, update bool) spec.Diagnostics {
	out := append(spec.Diagnostics(nil), diags...)
	for _, r := range results {
		out = append(out, r.Diags...)
		for _, c := range r.Cases {
			for _, f := range c.Failures {
				hint := ""
				if f.Updatable() && !update {
					hint = "fix the flow, or run acemq-flow test --update to write what happened as expected"
				}
				out = append(out, spec.Diagnostic{Pos: f.Pos, Severity: spec.Error, Code: "flowtest-failed",
					Msg: fmt.Sprintf("case %q: %s", c.Case.Name, f.Message()), Hint: hint})
			}
		}
	}
	return out
}

var testRenderers = map[string]func(io.Writer, spec.Diagnostics, []flowtest.Result, bool) error{
	"text": func(w io.Writer, ds spec.Diagnostics, rs []flowtest.Result, up bool) error {
		return renderDiagText(w, testDiags(ds, rs, up))
	},
	"github": func(w io.Writer, ds spec.Diagnostics, rs []flowtest.Result, up bool) error {
		return renderDiagGitHub(w, testDiags(ds, rs, up))
	},
	"json":  renderTestJSON,
	"junit": renderTestJUnit,
}

type jsonCase struct {
	File      string  `json:"file"`
	Line      int     `json:"line"`
	Col       int     `json:"col"`
	Name      string  `json:"name"`
	Passed    bool    `json:"passed"`
	Failures  int     `json:"failures"`
	ElapsedMS float64 `json:"elapsed_ms"`
}

// renderTestJSON prints {"diagnostics":[…as validate…],"cases":[{"file","line","col","name","passed","failures","elapsed_ms"}]}.
func renderTestJSON(w io.Writer, ds spec.Diagnostics, rs []flowtest.Result, up bool) error {
	out := struct {
		Diagnostics []jsonDiag `json:"diagnostics"`
		Cases       []jsonCase `json:"cases"`
	}{Diagnostics: []jsonDiag{}, Cases: []jsonCase{}}
	for _, d := range testDiags(ds, rs, up) {
		out.Diagnostics = append(out.Diagnostics, jsonDiag{File: d.Pos.File, Line: d.Pos.Line, Col: d.Pos.Col,
			Severity: d.Severity.String(), Code: d.Code, Message: d.Msg, Hint: d.Hint})
	}
	for _, r := range rs {
		for _, c := range r.Cases {
			out.Cases = append(out.Cases, jsonCase{File: c.Case.Pos.File, Line: c.Case.Pos.Line, Col: c.Case.Pos.Col, Name: c.Case.Name,
				Passed: len(c.Failures) == 0, Failures: len(c.Failures), ElapsedMS: float64(c.Elapsed.Microseconds()) / 1000})
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Error     *junitFailure `xml:"error,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// renderTestJUnit prints JUnit XML: one testsuite per file, one testcase
// per case, a failure holding each failing expectation's diagnostic.
func renderTestJUnit(w io.Writer, ds spec.Diagnostics, rs []flowtest.Result, up bool) error {
	var out junitSuites
	if len(ds) > 0 {
		s := junitSuite{Name: "acemq-flow test", Tests: 1, Errors: 1}
		s.Cases = append(s.Cases, junitCase{Name: "load", Classname: "acemq-flow test", Time: "0",
			Error: &junitFailure{Message: ds[0].Text(), Text: diagText(ds)}})
		out.Suites = append(out.Suites, s)
	}
	for _, r := range rs {
		s := junitSuite{Name: r.File.Path}
		if len(r.Diags) > 0 {
			s.Tests, s.Errors = 1, 1
			s.Cases = append(s.Cases, junitCase{Name: "flows", Classname: r.File.Path, Time: "0",
				Error: &junitFailure{Message: "the flows under test do not load", Text: diagText(r.Diags)}})
		}
		for _, c := range r.Cases {
			s.Tests++
			jc := junitCase{Name: c.Case.Name, Classname: r.File.Path, Time: fmt.Sprintf("%.3f", c.Elapsed.Seconds())}
			if len(c.Failures) > 0 {
				s.Failures++
				one := testDiags(nil, []flowtest.Result{{Cases: []flowtest.CaseResult{c}}}, up)
				jc.Failure = &junitFailure{Message: c.Failures[0].Message(), Text: diagText(one)}
			}
			s.Cases = append(s.Cases, jc)
		}
		out.Suites = append(out.Suites, s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func diagText(ds spec.Diagnostics) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.String())
		b.WriteByte('\n')
	}
	return b.String()
}
