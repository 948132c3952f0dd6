package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestReadVersion(t *testing.T) {
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		want versionView
	}{
		{"no build information", nil, versionView{
			Module: "github.com/acemq/acemq-flow", Version: "(unknown)",
			Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		}},
		{"built from a clean checkout", &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/acemq/acemq-flow", Version: "v0.0.0-20261202062000-7176a42e1f0b"},
			Settings: []debug.BuildSetting{
				{Key: "-trimpath", Value: "true"}, {Key: "CGO_ENABLED", Value: "0"},
				{Key: "GOARCH", Value: "arm64"}, {Key: "GOOS", Value: "linux"},
				{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "7176a42e1f0b5c3d9a8e7f6b5c4d3e2f1a0b9c8d"},
				{Key: "vcs.time", Value: "2026-12-02T06:20:00Z"}, {Key: "vcs.modified", Value: "false"},
			},
		}, versionView{
			Module: "github.com/acemq/acemq-flow", Version: "v0.0.0-20261202062000-7176a42e1f0b",
			Commit: "7176a42e1f0b5c3d9a8e7f6b5c4d3e2f1a0b9c8d", CommitTime: "2026-12-02T06:20:00Z",
			Go: "go1.26.8", Platform: "linux/arm64",
		}},
		{"built from a tree with changes", &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/acemq/acemq-flow", Version: "(devel)"},
			Settings:  []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}},
		}, versionView{
			Module: "github.com/acemq/acemq-flow", Version: "(devel)", Commit: "abc", Modified: true,
			Go: "go1.26.8", Platform: runtime.GOOS + "/" + runtime.GOARCH,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := readVersion(tc.bi); got != tc.want {
				t.Errorf("readVersion:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestRenderVersionText(t *testing.T) {
	var b bytes.Buffer
	v := versionView{Module: "github.com/acemq/acemq-flow", Version: "(devel)", Commit: "abc", CommitTime: "2026-12-02T06:20:00Z",
		Modified: true, Go: "go1.26.8", Platform: "linux/amd64"}
	if err := renderVersion(&b, "text", v); err != nil {
		t.Fatal(err)
	}
	want := "acemq-flow (devel)\nmodule:   github.com/acemq/acemq-flow\ncommit:   abc (2026-12-02T06:20:00Z), with uncommitted changes\ngo:       go1.26.8 linux/amd64\n"
	if b.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	v.Commit = ""
	if err := renderVersion(&b, "text", v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "commit:   unknown (built without version control information)") {
		t.Errorf("text without a commit:\n%s", b.String())
	}
}

func TestVersionCommand(t *testing.T) {
	out, errOut, code := cli(t, "version", "--format", "json")
	if code != 0 {
		t.Fatalf("acemq-flow version --format json: exit %d\nstderr: %s", code, errOut)
	}
	var v versionView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("version --format json is not JSON: %v\n%s", err, out)
	}
	if v.Go != runtime.Version() {
		t.Errorf("go = %q, want %q", v.Go, runtime.Version())
	}
	if _, errOut, code := cli(t, "version", "--format", "yaml"); code != 2 || !strings.Contains(errOut, "--format must be text or json") {
		t.Errorf("version --format yaml: exit %d, stderr %q; want 2 naming the formats", code, errOut)
	}
	if _, _, code := cli(t, "version", "extra"); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}

// TestVersionOfABuiltBinary builds acemq-flow as make build and make image
// do (-trimpath, -buildvcs=auto, from the git checkout) and checks that
// version names the commit checked out and whether the tree had changes;
// built with -buildvcs=false, it says it has no commit. -buildvcs is given
// on the command line, as GOFLAGS may turn it off.
func TestVersionOfABuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", "../.."}, args...)...).Output()
		if err != nil {
			t.Skipf("git %s: %v (not a git checkout, or no git)", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	before := git("rev-parse", "HEAD")
	dirty := git("status", "--porcelain") != ""
	bin := filepath.Join(t.TempDir(), "acemq-flow")
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=auto", "-o", bin, "./cmd/acemq-flow")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -trimpath ./cmd/acemq-flow: %v\n%s", err, out)
	}
	after := git("rev-parse", "HEAD")
	out, err := exec.Command(bin, "version", "--format", "json").Output()
	if err != nil {
		t.Fatalf("%s version --format json: %v", bin, err)
	}
	var v versionView
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("version --format json is not JSON: %v\n%s", err, out)
	}
	if v.Commit != before && v.Commit != after {
		t.Errorf("commit = %q, want HEAD %q", v.Commit, before)
	}
	if v.CommitTime == "" {
		t.Errorf("commit_time is empty: %s", out)
	}
	// Another change may land between the status and the build in a shared
	// tree; a clean tree stays clean in CI's fresh clone.
	if !dirty && v.Modified {
		t.Errorf("modified = true for a tree git calls clean")
	}
	if v.Module != "github.com/acemq/acemq-flow" || v.Version == "" || v.Version == "(unknown)" {
		t.Errorf("module %q version %q: want the module path and a version", v.Module, v.Version)
	}
	text, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", bin, err)
	}
	if !strings.HasPrefix(string(text), "acemq-flow "+v.Version+"\n") || !strings.Contains(string(text), v.Commit) {
		t.Errorf("version text does not show version %q and commit %q:\n%s", v.Version, v.Commit, text)
	}

	build = exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", bin, "./cmd/acemq-flow")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=false ./cmd/acemq-flow: %v\n%s", err, out)
	}
	text, err = exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", bin, err)
	}
	if !strings.Contains(string(text), "commit:   unknown (built without version control information)") {
		t.Errorf("a binary built with -buildvcs=false: version does not say it has no commit:\n%s", text)
	}
}
