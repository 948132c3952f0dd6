package spec

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Severity says whether a diagnostic stops a flow from running.
type Severity int

// Severities, in increasing order of gravity.
const (
	Warning Severity = iota + 1
	Error
)

// String returns "warning" or "error", as printed by every output format.
func (s Severity) String() string {
	if s == Warning {
		return "warning"
	}
	return "error"
}

// MarshalText renders the severity for --format json.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// A Diagnostic is one problem found in a flow file.
type Diagnostic struct {
	Pos      Pos
	Severity Severity
	Code     string // stable, e.g. "unknown-handler"; used by --format json and by tests
	Msg      string // what is wrong
	Hint     string // how to fix it; may be empty
}

// String renders the diagnostic as `file:line:col: error: what is wrong; how to fix it`.
func (d Diagnostic) String() string {
	var b strings.Builder
	b.WriteString(d.Pos.String())
	b.WriteString(": ")
	b.WriteString(d.Severity.String())
	b.WriteString(": ")
	b.WriteString(d.Text())
	return b.String()
}

// Text is the message and its hint joined as one sentence, without position.
func (d Diagnostic) Text() string {
	if d.Hint == "" {
		return d.Msg
	}
	return d.Msg + "; " + d.Hint
}

// Diagnostics is a list of problems, sorted by file, line and column. It is
// the error Load returns when any of them is an Error.
type Diagnostics []Diagnostic

// Error renders every diagnostic on its own line.
func (ds Diagnostics) Error() string {
	lines := make([]string, len(ds))
	for i, d := range ds {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

// HasErrors reports whether any diagnostic is an Error.
func (ds Diagnostics) HasErrors() bool {
	return slices.ContainsFunc(ds, func(d Diagnostic) bool { return d.Severity == Error })
}

// Sort orders the diagnostics by file, line, column, then code and message,
// so output is stable from run to run.
func (ds Diagnostics) Sort() {
	slices.SortStableFunc(ds, func(a, b Diagnostic) int {
		return cmp.Or(
			cmp.Compare(a.Pos.File, b.Pos.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Col, b.Pos.Col),
			cmp.Compare(a.Code, b.Code),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
}

// diags collects diagnostics during loading.
type diags struct {
	list Diagnostics
}

func (d *diags) errorf(pos Pos, code, hint, format string, args ...any) {
	d.list = append(d.list, Diagnostic{Pos: pos, Severity: Error, Code: code, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

func (d *diags) warnf(pos Pos, code, hint, format string, args ...any) {
	d.list = append(d.list, Diagnostic{Pos: pos, Severity: Warning, Code: code, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

func (d *diags) hasErrors() bool { return d.list.HasErrors() }
