package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/acemq/acemq-flow/runtime/flowdiff"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// gitBase is the old side of `diff --base REF PATH...`: the flow files
// (and the schema files beside them) under each PATH as they are at REF,
// written to a temporary folder under their paths in the repository, so
// $ref'd schemas resolve as they did.
type gitBase struct {
	ref      string
	commit   string   // the ref's commit: every read names it, so a ref holding a colon or moving meanwhile changes nothing
	top      string   // the repository's top folder
	tmp      string   // holds the files at REF, by their paths from top
	paths    []string // each PATH from top, slash-separated, that exists at REF
	cwd      string
	absPaths bool // a PATH was given absolute: show files by absolute paths, as LoadPaths does
}

// readGitBase finds the repository holding the current folder, checks
// ref, and writes the files under each of paths at ref to a temporary
// folder. A PATH that did not exist at ref has no old flows.
func readGitBase(ctx context.Context, ref string, paths []string) (*gitBase, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	top, err := git(ctx, cwd, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, fmt.Errorf("diff --base reads the old flows from git, and %s is not inside a git repository (%v); "+
			"run it in the repository, or compare two folders with diff OLD NEW", cwd, err)
	}
	g := &gitBase{ref: ref, top: strings.TrimSpace(string(top)), cwd: cwd}
	commit, err := git(ctx, g.top, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	if err != nil {
		return nil, fmt.Errorf("git knows no commit %q; name a branch, tag or commit (git fetch it first in a shallow CI clone: "+
			"git fetch origin main, with fetch-depth: 0 on actions/checkout)", ref)
	}
	g.commit = strings.TrimSpace(string(commit))
	if g.tmp, err = os.MkdirTemp("", "acemq-flow-diff-"); err != nil {
		return nil, err
	}
	for _, p := range paths {
		if filepath.IsAbs(p) {
			g.absPaths = true
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			g.remove()
			return nil, err
		}
		rel, err := filepath.Rel(g.top, abs)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			g.remove()
			return nil, fmt.Errorf("path %s is outside the git repository at %s, so it has no version at %s", p, g.top, ref)
		}
		rel = filepath.ToSlash(rel)
		found, err := g.copyTree(ctx, rel)
		if err != nil {
			g.remove()
			return nil, err
		}
		if found {
			g.paths = append(g.paths, rel)
		}
	}
	return g, nil
}

func git(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(errb.String()); msg != "" {
			return nil, fmt.Errorf("git %s: %s", args[0], msg)
		}
		return nil, fmt.Errorf("git %s: %w", args[0], err)
	}
	return out, nil
}

// copyTree writes the YAML and JSON files of rel at the ref to the
// temporary folder: all of them below a folder; for a file, the file and
// the JSON files of its folder, where its $refs point. It reports whether
// rel existed at the ref.
func (g *gitBase) copyTree(ctx context.Context, rel string) (bool, error) {
	entries, err := g.list(ctx, rel)
	if err != nil {
		return false, err
	}
	isFile := len(entries) == 1 && entries[0] == rel
	if isFile {
		dir := path.Dir(rel)
		if dir == "." {
			dir = ""
		}
		more, err := g.list(ctx, dir)
		if err != nil {
			return false, err
		}
		for _, e := range more {
			if strings.HasSuffix(e, ".json") {
				entries = append(entries, e)
			}
		}
	}
	var want []string
	for _, e := range entries {
		if isFile || strings.HasSuffix(e, ".yaml") || strings.HasSuffix(e, ".yml") || strings.HasSuffix(e, ".json") {
			want = append(want, e)
		}
	}
	blobs, err := g.read(ctx, want)
	if err != nil {
		return false, err
	}
	for i, e := range want {
		dst := filepath.Join(g.tmp, filepath.FromSlash(e))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return false, err
		}
		if err := os.WriteFile(dst, blobs[i], 0o644); err != nil {
			return false, err
		}
	}
	return len(entries) > 0, nil
}

// read reads the files at the ref through one `git cat-file --batch`.
func (g *gitBase) read(ctx context.Context, files []string) ([][]byte, error) {
	if len(files) == 0 {
		return nil, nil
	}
	var in strings.Builder
	for _, f := range files {
		if strings.ContainsAny(f, "\n\r") {
			return nil, fmt.Errorf("read %q at %s: a file name holding a line break cannot be read", f, g.ref)
		}
		in.WriteString(g.commit + ":" + f + "\n")
	}
	cmd := exec.CommandContext(ctx, "git", "cat-file", "--batch")
	cmd.Dir = g.top
	cmd.Stdin = strings.NewReader(in.String())
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("read the files at %s: git cat-file: %v %s", g.ref, err, strings.TrimSpace(errb.String()))
	}
	blobs := make([][]byte, len(files))
	for i, f := range files {
		header, rest, ok := bytes.Cut(out, []byte("\n"))
		fields := strings.Fields(string(header))
		var size int
		if !ok || len(fields) != 3 || fields[1] != "blob" {
			return nil, fmt.Errorf("read %s at %s: git cat-file answered %q", f, g.ref, header)
		}
		if _, err := fmt.Sscan(fields[2], &size); err != nil || size+1 > len(rest) {
			return nil, fmt.Errorf("read %s at %s: git cat-file answered %q", f, g.ref, header)
		}
		blobs[i], out = rest[:size], rest[size+1:]
	}
	return blobs, nil
}

// list names the files (blobs, no symbolic links) under rel at the ref,
// from the top of the repository.
func (g *gitBase) list(ctx context.Context, rel string) ([]string, error) {
	args := []string{"ls-tree", "-r", "-z", "--full-name", g.commit, "--"}
	if rel != "" && rel != "." {
		args = append(args, rel)
	}
	out, err := git(ctx, g.top, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s at %s: %w", rel, g.ref, err)
	}
	var files []string
	for _, rec := range strings.Split(string(out), "\x00") {
		meta, name, ok := strings.Cut(rec, "\t")
		if !ok {
			continue
		}
		if f := strings.Fields(meta); len(f) == 3 && f[1] == "blob" && f[0] != "120000" {
			files = append(files, name)
		}
	}
	return files, nil
}

func (g *gitBase) remove() {
	if g.tmp != "" {
		_ = os.RemoveAll(g.tmp)
	}
}

// display names a file of the old side as the new side names the same
// file (relative to the current folder, or absolute), so both sides'
// positions point at the file in the working tree.
func (g *gitBase) display(fsPath string) string {
	full := filepath.Join(g.top, filepath.FromSlash(fsPath))
	if g.absPaths {
		return full
	}
	if r, err := filepath.Rel(g.cwd, full); err == nil {
		return filepath.ToSlash(r)
	}
	return full
}

// readFile reads a schema file of the old side by its displayed name.
func (g *gitBase) readFile(name string) ([]byte, error) {
	full := name
	if !filepath.IsAbs(full) {
		full = filepath.Join(g.cwd, filepath.FromSlash(name))
	}
	rel, err := filepath.Rel(g.top, full)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("%s is outside the repository", name)
	}
	return os.ReadFile(filepath.Join(g.tmp, rel))
}

// load loads and compiles the flows at the ref; no PATH existing there is
// no flows at all, and every flow of the new side an addition.
func (g *gitBase) load(io streams, format string) (flowdiff.Side, error) {
	side := flowdiff.Side{ReadFile: g.readFile}
	if len(g.paths) == 0 {
		return side, nil
	}
	which := fmt.Sprintf("the flows at %s", g.ref)
	set, err := spec.LoadWith(os.DirFS(g.tmp), spec.Options{Root: g.tmp, Display: g.display}, g.paths...)
	var diags spec.Diagnostics
	if set != nil {
		for _, n := range set.Notices {
			fmt.Fprintln(io.err, n)
		}
	}
	if err != nil {
		ds, ok := err.(spec.Diagnostics)
		if !ok {
			ds = spec.Diagnostics{{Severity: spec.Error, Code: "load", Msg: err.Error()}}
		}
		diags = ds
		if !diags.HasErrors() {
			diags = append(diags, spec.Diagnostic{Severity: spec.Error, Code: "load", Msg: err.Error()})
		}
		return side, loadFailed(io, format, which, diags)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		ds, ok := err.(spec.Diagnostics)
		if !ok {
			ds = spec.Diagnostics{{Severity: spec.Error, Code: "compile", Msg: err.Error()}}
		}
		return side, loadFailed(io, format, which, ds)
	}
	side.Flows, side.Plan = set.Flows, pl
	return side, nil
}
