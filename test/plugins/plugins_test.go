// Package plugins_test checks every example plugin end to end: built the way
// `make build` builds it, started as a separate process through
// plugins/host, described and called.
package plugins_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/acemq/acemq-flow/plugins/host"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestExamplePlugins builds each examples/plugins/<name>/main.go to
// <tmp>/<name>, starts it, and checks it describes at least one handler and
// answers a call to each handler named echo.
func TestExamplePlugins(t *testing.T) {
	root := repoRoot(t)
	mains, err := filepath.Glob(filepath.Join(root, "examples", "plugins", "*", "main.go"))
	if err != nil || len(mains) == 0 {
		t.Fatalf("no example plugins found under examples/plugins (%v)", err)
	}
	bin := t.TempDir()
	for _, m := range mains {
		name := filepath.Base(filepath.Dir(m))
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(bin, name)
			cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./examples/plugins/"+name)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build ./examples/plugins/%s: %v\n%s", name, err, b)
			}
			p, err := host.Start(t.Context(), host.Config{Name: name, Command: out, Dir: filepath.Dir(m)})
			if err != nil {
				t.Fatalf("host.Start(%s): %v", name, err)
			}
			defer func() {
				if err := p.Close(); err != nil {
					t.Errorf("Close(%s): %v", name, err)
				}
			}()
			hs, err := p.Describe(t.Context())
			if err != nil || len(hs) == 0 {
				t.Fatalf("Describe(%s) = %v, %v; want at least one handler", name, hs, err)
			}
			for _, h := range hs {
				if h.Name != "echo" {
					continue
				}
				res, err := p.Call(t.Context(), host.Request{Handler: "echo", Envelope: host.Envelope{MessageID: "e2e", Attempt: 1}, Payload: []byte(`{"e2e":true}`)})
				if err != nil || string(res.Payload) != `{"e2e":true}` {
					t.Fatalf("%s.echo = %q, %v", name, res.Payload, err)
				}
			}
		})
	}
}
