package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

// TestAPluginThatCrashesIsRetriedAndRestarted sends a message to a handler
// that kills its plugin process mid-call: each crash is a retryable failure,
// the plugin is restarted, the message climbs the ladder and ends in .dlq
// with the reason, and the runtime keeps serving other messages.
func TestAPluginThatCrashesIsRetriedAndRestarted(t *testing.T) {
	url := testenv.VHost(t)
	addr := testenv.FreeAddr(t)
	startRuntime(t, url, "--admin", addr, writeFlow(t, `version: acemq.flow/v1
name: e2e
defaults:
  retry: {max_attempts: 2, initial_delay: 200ms, max_delay: 1s, jitter: 0}
plugins:
  testkit: {command: TESTKIT}
pipelines:
  - name: boom
    steps:
      - {name: crash, handler: testkit.crash}
  - name: fine
    steps:
      - {name: echo, handler: testkit.echo}
`))
	ch := dial(t, url)
	res := consumeResults(t, ch, "results")
	pub := dial(t, url)
	publishN(t, pub, "boom", "crash", "", 1, `{}`)
	m := getOne(t, ch, "boom.crash.dlq", 60*time.Second)
	if kind := fmt.Sprint(m.Headers["x-acemq-error-kind"]); kind != "exhausted" {
		t.Errorf("error kind %s, want exhausted: a crash is retryable, not fatal", kind)
	}
	if e := fmt.Sprint(m.Headers["x-acemq-error"]); !strings.Contains(e, "attempt 2 of 2") {
		t.Errorf("x-acemq-error = %q, want the last attempt's failure", e)
	}
	ids := publishN(t, pub, "fine", "echo", "results", 1, `{"still":"serving"}`)
	res.until(t, ids, 30*time.Second, nil)

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var restarts float64
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, `acemq_plugin_restarts_total{plugin="testkit"}`) {
			fmt.Sscan(strings.Fields(line)[1], &restarts)
		}
	}
	if restarts < 2 {
		t.Errorf("acemq_plugin_restarts_total = %v, want at least 2 (one per crash)", restarts)
	}
}
