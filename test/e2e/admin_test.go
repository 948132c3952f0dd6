package e2e

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

// TestConsumersCommandSteersTheRunningRuntime drives the registry through
// the CLI, and sends a message with no flow files: the runtime builds it.
func TestConsumersCommandSteersTheRunningRuntime(t *testing.T) {
	url := testenv.VHost(t)
	addr := testenv.FreeAddr(t)
	startRuntime(t, url, "--admin", addr, writeFlow(t, threeSteps))

	out, errOut, code := cli(t, "send", "--admin", addr, "--amqp", url, "--pipeline", "hops", "--data", `{"k":"v"}`, "--wait", "30s")
	if code != 0 || !strings.Contains(errOut, "outcome: completed") || strings.TrimSpace(out) != `{"k":"v"}` {
		t.Fatalf("send without PATH: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}

	for range 4 {
		if _, errOut, code := cli(t, "send", "--admin", addr, "--amqp", url, "--pipeline", "hops", "--data", `{}`, "--wait", "30s"); code != 0 {
			t.Fatalf("send: exit %d: %s", code, errOut)
		}
	}
	// A group is one broker consumer whose prefetch is its size times the
	// step's prefetch (100 per handler); it subscribes again with the new
	// prefetch a moment after a scale returns.
	brokerPrefetch := func(want string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, func() error {
			var pf []string
			for _, c := range testenv.BrokerConsumers(t, url, "hops.a") {
				pf = append(pf, c.Prefetch)
			}
			if !slices.Equal(pf, []string{want}) {
				return testenv.Errorf("the broker shows prefetch counts %v on hops.a, want one consumer of prefetch %s", pf, want)
			}
			return nil
		})
	}
	brokerPrefetch("400")
	for _, size := range []int{1, 6} {
		if _, errOut, code := cli(t, "consumers", "scale", "hops.a", strconv.Itoa(size), "--admin", addr); code != 0 {
			t.Fatalf("scale %d: exit %d: %s", size, code, errOut)
		}
		brokerPrefetch(strconv.Itoa(size * 100))
	}
	if _, errOut, code := cli(t, "consumers", "prefetch", "hops.a", "9", "--admin", addr); code != 0 {
		t.Fatalf("prefetch: exit %d: %s", code, errOut)
	}
	brokerPrefetch("54")

	steps := []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{[]string{"consumers", "list"}, 0, "hops.a"},
		{[]string{"consumers", "scale", "hops.a", "0"}, 2, "a group needs at least one consumer"},
		{[]string{"consumers", "scale", "hops.a", "2"}, 0, "size 2"},
		{[]string{"consumers", "prefetch", "hops.a", "5"}, 0, "prefetch 5"},
		{[]string{"consumers", "stop", "hops.b"}, 0, "stop done"},
		{[]string{"consumers", "list"}, 0, "stopped"},
		{[]string{"consumers", "start", "hops.b"}, 0, "start done"},
		{[]string{"consumers", "start", "nope"}, 1, `no such consumer "nope"`},
		{[]string{"consumers", "scale", "hops.a", "two"}, 2, "not a whole number"},
	}
	for _, s := range steps {
		out, errOut, code := cli(t, append(s.args, "--admin", addr)...)
		if code != s.code || !strings.Contains(out+errOut, s.want) {
			t.Errorf("acemq-flow %s: exit %d, want %d with %q\nstdout %s\nstderr %s", strings.Join(s.args, " "), code, s.code, s.want, out, errOut)
		}
	}
	out, _, _ = cli(t, "consumers", "list", "--admin", addr, "--format", "json")
	for _, want := range []string{`"id": "hops.a"`, `"size": 2`, `"prefetch": 5`, `"acknowledged": 5`} {
		if !strings.Contains(out, want) {
			t.Errorf("consumers list --format json lacks %s:\n%s", want, out)
		}
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `acemq_messages_total{consumer="hops.c",outcome="acknowledged"} 5`) {
		t.Errorf("/metrics lacks the completed message:\n%s", body)
	}
	if strings.Contains(string(body), "guest:guest") {
		t.Error("/metrics shows the broker password")
	}
}
