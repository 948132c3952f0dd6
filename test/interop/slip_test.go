// Package interop checks acemq-flow against clients that are not its own.
package interop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

// TestASlipWrittenInPythonIsFollowedAndWrittenBackFieldForField sends a
// message from Python's pika with a slip it wrote into a route whose middle
// stop acemq-flow serves; the client checks the slip that arrives at the end.
func TestASlipWrittenInPythonIsFollowedAndWrittenBackFieldForField(t *testing.T) {
	url := testenv.VHost(t)
	if err := exec.Command("/usr/bin/python3", "-c", "import pika").Run(); err != nil {
		// The broker is there (VHost skips without it); pika is part of what
		// `make services` installs, so its absence fails rather than passes.
		t.Fatal("/usr/bin/python3 cannot import pika; run `make services` (it installs python3-pika)")
	}
	wd, _ := os.Getwd()
	repo := filepath.Clean(filepath.Join(wd, "..", ".."))
	bin := filepath.Join(t.TempDir(), "acemq-flow")
	testkit := filepath.Join(t.TempDir(), "testkit")
	for out, pkg := range map[string]string{bin: "./cmd/acemq-flow", testkit: "./examples/plugins/testkit"} {
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Dir = repo
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	flow := filepath.Join(t.TempDir(), "flow.yaml")
	if err := os.WriteFile(flow, []byte(`version: acemq.flow/v1
name: interop
plugins:
  testkit: {command: `+testkit+`}
consumers:
  - id: middle
    queue: interop.middle
    handler: testkit.echo
    bind: [{exchange: interop-ex, routing_key: interop.middle}]
    declare: {type: quorum}
topology:
  exchanges: [{name: interop-ex, type: topic}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var log testenv.Buffer
	run := exec.Command(bin, "run", "--amqp", url, "--admin", "", flow)
	run.Stderr = &log
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = run.Process.Signal(syscall.SIGTERM)
		_ = run.Wait()
	})
	testenv.Eventually(t, 60*time.Second, func() error {
		if !strings.Contains(log.String(), "runtime started") {
			return testenv.Errorf("the runtime has not started; log:\n%s", log.String())
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := exec.CommandContext(ctx, "/usr/bin/python3", "slip_client.py", url, "interop-ex")
	out, err := client.CombinedOutput()
	if err != nil {
		t.Fatalf("the Python client says the slip is not what it expects:\n%s\nruntime log:\n%s", out, log.String())
	}
	if strings.TrimSpace(string(out)) != "ok" {
		t.Errorf("client output %q", out)
	}
}
