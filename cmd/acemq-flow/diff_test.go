package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiffUsageAndLoadErrors(t *testing.T) {
	const steps = "testdata/diff/steps/"
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: acemq.flow/v1\nname: bad\npipelines:\n  - name: p\n    steps:\n      - {name: a, handler: nope.a}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{"no path is a usage error", []string{"diff"}, 2, "", "needs OLD and NEW"},
		{"one path without --base is a usage error", []string{"diff", steps + "old"}, 2, "", "needs OLD and NEW"},
		{"--base without a path is a usage error", []string{"diff", "--base", "HEAD"}, 2, "", "needs the PATHs"},
		{"an unknown format is a usage error", []string{"diff", "--format", "xml", steps + "old", steps + "new"}, 2, "", "--format must be text, json or github"},
		{"new flows that do not load exit 2 with their diagnostics", []string{"diff", steps + "old", bad}, 2,
			`bad.yaml:6:28: error: step "a" uses handler "nope.a"`, "the new flows do not load"},
		{"a missing old path exits 2", []string{"diff", "does/not/exist", steps + "new"}, 2, "does/not/exist cannot be read", "the old flows do not load"},
		{"the same flows on both sides exit 0 with nothing", []string{"diff", steps + "new", steps + "new"}, 0, "", "0 breaking change(s)"},
		{"notices alone exit 0", []string{"diff", "testdata/diff/notices/old", "testdata/diff/notices/new"}, 0, "", "6 that break nothing (--all lists them)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := cli(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("acemq-flow %s: exit %d\nstdout: %s\nstderr: %s\nwant exit %d, stdout with %q, stderr with %q",
					strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

// gitRepo makes a repository in a temporary folder holding files, commits
// them, and makes it the current folder for the test.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "."},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "flows"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Chdir(dir)
	return dir
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const gitFlow = `version: acemq.flow/v1
name: shop
plugins:
  k: {command: ./k}
types:
  Order: {$ref: schemas/order.json}
pipelines:
  - name: orders
    input: Order
    steps:
      - {name: validate, handler: k.validate, output: Order}
      - {name: charge, handler: k.charge, output: Order}
      - {name: ship, handler: k.ship, output: none}
`

// TestDiffBase compares the working tree with a commit: the old flows and
// the schema files their $refs name are read from git, and positions name
// the files as the command line does.
func TestDiffBase(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed for diff --base and its test")
	}
	gitRepo(t, map[string]string{
		"flows/shop.yaml":          gitFlow,
		"flows/schemas/order.json": `{"type": "object", "properties": {"id": {"type": "string"}}}`,
		"README.md":                "not a flow",
	})
	// The working tree: a step removed, the schema narrowed, a new flow
	// folder that did not exist at the commit.
	writeFiles(t, ".", map[string]string{
		"flows/shop.yaml":          strings.Replace(gitFlow, "      - {name: charge, handler: k.charge, output: Order}\n", "", 1),
		"flows/schemas/order.json": `{"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}`,
		"more/extra.yaml":          "version: acemq.flow/v1\nname: extra\nplugins:\n  k: {command: ./k}\npipelines:\n  - name: extra\n    steps:\n      - {name: a, handler: k.a}\n",
	})

	out, errOut, code := cli(t, "diff", "--base", "main", "flows")
	if code != 1 {
		t.Fatalf("diff --base main flows: exit %d, want 1\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, want := range []string{
		`flows/shop.yaml:12:10: error: step "charge" of pipeline "orders" is removed`,
		`flows/shop.yaml:6:3: error: type "Order", read by step "ship" of pipeline "orders", step "validate" of pipeline "orders", is narrowed, so it may refuse what a writer with the old one wrote: at $.id, the property is now required`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("diff --base main flows: stdout lacks %q:\n%s", want, out)
		}
	}

	out, errOut, code = cli(t, "diff", "--base", "main", "--format", "github", "--all", "flows", "more")
	if code != 1 || !strings.Contains(out, "::notice file=more/extra.yaml,line=6,col=5,title=acemq-flow diff pipeline-added::") {
		t.Errorf("diff --base main flows more: exit %d, stdout:\n%s\nstderr: %s\nwant exit 1 and a notice of the pipeline added in more/", code, out, errOut)
	}

	// A subfolder as the current folder: paths are taken from it, as the
	// shell gives them.
	t.Chdir("flows")
	out, _, code = cli(t, "diff", "--base", "main", "--format", "json", "shop.yaml")
	var doc struct {
		Diagnostics []struct {
			File string `json:"file"`
			Code string `json:"code"`
		} `json:"diagnostics"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 1 || len(doc.Diagnostics) != 2 || doc.Diagnostics[0].File != "shop.yaml" {
		t.Errorf("diff --base main shop.yaml from flows/: exit %d, %v:\n%s\nwant exit 1 and two changes in shop.yaml", code, err, out)
	}

	_, errOut, code = cli(t, "diff", "--base", "no-such-branch", "shop.yaml")
	if code != 2 || !strings.Contains(errOut, `git knows no commit "no-such-branch"`) {
		t.Errorf("diff --base no-such-branch: exit %d, stderr %q; want exit 2 naming the ref", code, errOut)
	}
}

func TestDiffBaseOutsideAGitRepository(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"shop.yaml": gitFlow, "schemas/order.json": `{"type": "object"}`})
	t.Chdir(dir)
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(dir))
	_, errOut, code := cli(t, "diff", "--base", "main", "shop.yaml")
	if code != 2 || !strings.Contains(errOut, "is not inside a git repository") || !strings.Contains(errOut, "diff OLD NEW") {
		t.Errorf("diff --base outside a repository: exit %d, stderr %q; want exit 2 saying so and naming diff OLD NEW", code, errOut)
	}
}

// TestDiffBaseThatDoesNotLoad: flows that do not load at the ref stop the
// comparison with their diagnostics, exit 2, naming the ref.
func TestDiffBaseThatDoesNotLoad(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed for diff --base and its test")
	}
	broken := strings.Replace(gitFlow, "handler: k.ship", "handler: nope.ship", 1)
	gitRepo(t, map[string]string{"flows/shop.yaml": broken, "flows/schemas/order.json": `{"type": "object"}`})
	writeFiles(t, ".", map[string]string{"flows/shop.yaml": gitFlow})
	out, errOut, code := cli(t, "diff", "--base", "main", "flows")
	if code != 2 || !strings.Contains(out, `flows/shop.yaml:13:31: error: step "ship" uses handler "nope.ship"`) ||
		!strings.Contains(errOut, "the flows at main do not load") {
		t.Errorf("diff --base main with a broken flow at main: exit %d\nstdout: %s\nstderr: %s\nwant exit 2, the diagnostic and the ref named", code, out, errOut)
	}
}
