package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateGoldens renders the diagnostics of fixed flows in every
// format. testdata/validate/invalid holds errors of each stage (YAML
// syntax, schema, semantic checks) beside a warning, and a file whose name
// and key the github format must escape; a missing path adds a diagnostic
// without a line. testdata/validate/valid is valid with a warning.
func TestValidateGoldens(t *testing.T) {
	const dir = "testdata/validate"
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"invalid", []string{dir + "/invalid", dir + "/missing.yaml"}, 1},
		{"valid", []string{dir + "/valid"}, 0},
	}
	for _, tc := range cases {
		for format, ext := range map[string]string{"text": "txt", "json": "json", "github": "github"} {
			t.Run(tc.name+"."+ext, func(t *testing.T) {
				args := append([]string{"validate", "--format", format}, tc.args...)
				out, errOut, code := cli(t, args...)
				if code != tc.code {
					t.Fatalf("acemq-flow %s: exit %d, want %d\nstderr: %s", strings.Join(args, " "), code, tc.code, errOut)
				}
				golden(t, filepath.Join(dir, tc.name+"."+ext+".golden"), []byte(out))
			})
		}
	}
}
