package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDiffGoldens compares each old/new pair of testdata/diff, one per
// family of changes (pipeline steps, queues and exchanges, payload types,
// itineraries and sagas, changes that break nothing, and the rest of the
// kinds), in every format:
// text as CI shows it (breaking changes only) and with --all, json and
// github with --all.
func TestDiffGoldens(t *testing.T) {
	const dir = "testdata/diff"
	cases := []struct {
		name string
		code int
	}{
		{"steps", 1},
		{"queues", 1},
		{"types", 1},
		{"routes", 1},
		{"notices", 0},
		{"more", 1}, // the kinds the others leave out
	}
	outputs := []struct {
		ext  string
		args []string
	}{
		{"txt", []string{"--format", "text"}},
		{"all.txt", []string{"--format", "text", "--all"}},
		{"json", []string{"--format", "json", "--all"}},
		{"github", []string{"--format", "github", "--all"}},
	}
	for _, tc := range cases {
		for _, o := range outputs {
			t.Run(tc.name+"."+o.ext, func(t *testing.T) {
				args := append(append([]string{"diff"}, o.args...), filepath.Join(dir, tc.name, "old"), filepath.Join(dir, tc.name, "new"))
				out, errOut, code := cli(t, args...)
				if code != tc.code {
					t.Fatalf("acemq-flow %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, tc.code, out, errOut)
				}
				golden(t, filepath.Join(dir, tc.name+"."+o.ext+".golden"), []byte(out))
			})
		}
	}
}
