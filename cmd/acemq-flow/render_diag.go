package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/acemq/acemq-flow/spec"
)

var diagRenderers = map[string]func(io.Writer, spec.Diagnostics) error{
	"text":   renderDiagText,
	"json":   renderDiagJSON,
	"github": renderDiagGitHub,
}

// renderDiagText prints `file:line:col: error: what is wrong; how to fix it`.
func renderDiagText(w io.Writer, ds spec.Diagnostics) error {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.String())
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

type jsonDiag struct {
	File     string `json:"file"`
	Line     int    `json:"line"`
	Col      int    `json:"col"`
	Severity string `json:"severity"`
	Code     string `json:"code"`
	Message  string `json:"message"`
	Hint     string `json:"hint"`
}

// renderDiagJSON prints {"diagnostics":[{"file","line","col","severity","code","message","hint"}]}.
func renderDiagJSON(w io.Writer, ds spec.Diagnostics) error {
	out := struct {
		Diagnostics []jsonDiag `json:"diagnostics"`
	}{Diagnostics: []jsonDiag{}}
	for _, d := range ds {
		out.Diagnostics = append(out.Diagnostics, jsonDiag{File: d.Pos.File, Line: d.Pos.Line, Col: d.Pos.Col,
			Severity: d.Severity.String(), Code: d.Code, Message: d.Msg, Hint: d.Hint})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// renderDiagGitHub prints workflow-command annotations for GitHub Actions.
func renderDiagGitHub(w io.Writer, ds spec.Diagnostics) error {
	var b strings.Builder
	for _, d := range ds {
		at := "file=" + ghProp(d.Pos.File)
		if d.Pos.Line > 0 {
			// A diagnostic about a whole path (one that cannot be read) has
			// no line: GitHub then annotates the file.
			at += fmt.Sprintf(",line=%d,col=%d", d.Pos.Line, d.Pos.Col)
		}
		fmt.Fprintf(&b, "::%s %s,title=%s::%s\n", d.Severity, at, ghProp("acemq-flow "+d.Code), ghData(d.Text()))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func ghProp(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}
