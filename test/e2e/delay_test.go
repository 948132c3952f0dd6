package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

const delayedStep = `version: acemq.flow/v1
name: e2e
plugins:
  testkit: {command: TESTKIT}
pipelines:
  - name: later
    steps:
      - {name: reserve, handler: testkit.echo}
      - {name: check, handler: testkit.echo, delay: 2s}
`

// TestAStepDelayEndToEnd: acemq-flow run with a step that has `delay:`, and
// send --wait: the run completes, its reply coming no sooner than the
// delay, through the real 1 s levels of the ladder the runtime declared.
func TestAStepDelayEndToEnd(t *testing.T) {
	url := testenv.VHost(t)
	flow := writeFlow(t, delayedStep)
	p := startRuntime(t, url, flow)
	start := time.Now()
	out, errOut, code := cli(t, "send", flow, "--amqp", url, "--pipeline", "later", "--data", `{"order":"A-1"}`, "--wait", "30s")
	took := time.Since(start)
	if code != 0 || !strings.Contains(errOut, "outcome: completed") || strings.TrimSpace(out) != `{"order":"A-1"}` {
		t.Fatalf("send --wait: exit %d\nstdout %s\nstderr %s\nruntime log:\n%s", code, out, errOut, p.output())
	}
	if took < 2*time.Second || took > 10*time.Second {
		t.Errorf("the run took %s, want the 2 s delay and little more", took)
	}

	// send --in to the same running runtime: delivered when due.
	start = time.Now()
	out, errOut, code = cli(t, "send", flow, "--amqp", url, "--pipeline", "later", "--data", `{"order":"A-2"}`, "--in", "1s", "--wait", "30s")
	took = time.Since(start)
	if code != 0 || !strings.Contains(errOut, "into the delay ladder") || !strings.Contains(errOut, "outcome: completed") {
		t.Fatalf("send --in 1s --wait: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if took < 3*time.Second {
		t.Errorf("the run sent with --in 1s took %s, want the 1 s and the step's 2 s at least", took)
	}
}
