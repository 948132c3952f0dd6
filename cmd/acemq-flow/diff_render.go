package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/acemq/acemq-flow/runtime/flowdiff"
	"github.com/acemq/acemq-flow/spec"
)

// diffRenderers print changes as validate prints diagnostics; a change that
// breaks nothing has the severity "notice".
var diffRenderers = map[string]func(io.Writer, flowdiff.Changes) error{
	"text":   renderChangesText,
	"json":   renderChangesJSON,
	"github": renderChangesGitHub,
}

// renderChangesText prints `file:line:col: error: what changes; what
// happens in flight; how to deploy it`.
func renderChangesText(w io.Writer, cs flowdiff.Changes) error {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.String())
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// jsonChange is a change as --format json prints it: validate's fields
// (message: what changes and what happens in flight; hint: how to deploy
// it) and the change's own.
type jsonChange struct {
	jsonDiag
	Breaking bool     `json:"breaking"`
	Old      bool     `json:"old_file,omitempty"`
	InFlight string   `json:"in_flight,omitempty"`
	Queues   []string `json:"queues,omitempty"`
	Drained  bool     `json:"drained,omitempty"`
}

// renderChangesJSON prints {"diagnostics":[{"file","line","col","severity",
// "code","message","hint","breaking",...}]}.
func renderChangesJSON(w io.Writer, cs flowdiff.Changes) error {
	out := struct {
		Diagnostics []jsonChange `json:"diagnostics"`
	}{Diagnostics: []jsonChange{}}
	for _, c := range cs {
		msg := c.Msg
		if c.Drained || c.InFlight != "" {
			msg = strings.TrimSuffix(c.Text(), "; "+c.Deploy)
		}
		out.Diagnostics = append(out.Diagnostics, jsonChange{
			jsonDiag: jsonDiag{File: c.Pos.File, Line: c.Pos.Line, Col: c.Pos.Col, Severity: c.Severity(), Code: string(c.Kind),
				Message: msg, Hint: c.Deploy},
			Breaking: c.Breaking, Old: c.Old, InFlight: c.InFlight, Queues: c.Queues, Drained: c.Drained,
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// renderChangesGitHub prints workflow-command annotations: ::error,
// ::warning or ::notice.
func renderChangesGitHub(w io.Writer, cs flowdiff.Changes) error {
	var b strings.Builder
	for _, c := range cs {
		at := "file=" + ghProp(c.Pos.File)
		if c.Pos.Line > 0 {
			at += fmt.Sprintf(",line=%d,col=%d", c.Pos.Line, c.Pos.Col)
		}
		fmt.Fprintf(&b, "::%s %s,title=%s::%s\n", c.Severity(), at, ghProp("acemq-flow diff "+string(c.Kind)), ghData(c.Text()))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// loadFailed prints the diagnostics of flows that do not load, as
// validate would, and gives exit 2: nothing was compared.
func loadFailed(io streams, format, which string, diags spec.Diagnostics) error {
	if err := diagRenderers[format](io.out, diags); err != nil {
		return failed("write diagnostics: %w", err)
	}
	return &exitError{code: 2, err: fmt.Errorf("%s do not load, so nothing was compared; fix them (acemq-flow validate shows the same)", which)}
}
