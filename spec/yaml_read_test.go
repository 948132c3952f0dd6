package spec

import (
	"strings"
	"testing"
)

func TestReadYAMLKeepsPositionsAndLeavesVariablesAsWritten(t *testing.T) {
	k := YAMLKind{Name: "a test file", Empty: "start it with `version: x`", One: "one a file"}
	root, ds := ReadYAML("t.yaml", []byte("version: x\ncases:\n  - name: ${NAME}\n    n: 3\n"), k)
	if ds.HasErrors() || !root.IsMap() {
		t.Fatalf("ReadYAML = %v, %v; want a mapping", root, ds)
	}
	c := root.Get("cases")
	if !c.IsSeq() || len(c.Items()) != 1 {
		t.Fatalf("cases = %v, want a list of one", c.JSON())
	}
	name := c.Items()[0].Get("name")
	if s, _ := name.Str(); s != "${NAME}" || name.Pos() != (Pos{File: "t.yaml", Line: 3, Col: 11}) {
		t.Errorf("name = %q at %s, want ${NAME} as written at t.yaml:3:11", s, name.Pos())
	}
	if n := c.Items()[0].Get("n").Value(); n != int64(3) {
		t.Errorf("n = %#v, want int64 3", n)
	}
}

func TestReadYAMLRefusesWhatAFlowFileMayNotBe(t *testing.T) {
	k := YAMLKind{Name: "a test file", Empty: "start it with `version: x`", One: "one a file"}
	cases := []struct {
		name, text, code, msg string
	}{
		{"an empty file", "# nothing\n", "empty-file", "no YAML document"},
		{"two documents", "a: 1\n---\nb: 2\n", "multiple-documents", "a test file holds one"},
		{"nesting too deep", strings.Repeat("[", 70) + strings.Repeat("]", 70) + "\n", "too-deep", "deeper than"},
		{"bad syntax", "a: [1, 2\n", "yaml-syntax", "invalid YAML"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, ds := ReadYAML("t.yaml", []byte(tc.text), k)
			if root != nil || len(ds) == 0 || ds[0].Code != tc.code || !strings.Contains(ds[0].Msg, tc.msg) {
				t.Fatalf("ReadYAML(%s) = %v, %v; want no tree and a %s diagnostic saying %q", tc.name, root, ds, tc.code, tc.msg)
			}
		})
	}
}
