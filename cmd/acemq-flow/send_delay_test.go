package main

import (
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestTheLongestDelayIsTheLaddersEverywhere: validate, send --in and send
// --at refuse a delay beyond what the delay ladder holds (2^28 - 1 s) and
// take the longest it does hold: a step delay of one second more is a
// file:line:col diagnostic with a hint; --in or --at one minute beyond is
// refused before anything is sent, one minute within goes on to the broker
// (here a vhost without the ladder, which send names).
func TestTheLongestDelayIsTheLaddersEverywhere(t *testing.T) {
	if spec.MaxDelay != (decide.Ladder{}).MaxDelay() {
		t.Fatalf("validate's longest delay %s is not the ladder's %s", spec.MaxDelay, decide.Ladder{}.MaxDelay())
	}
	out, _, code := cli(t, "validate", "../../spec/testdata/invalid/delay-too-long.yaml")
	if code != 1 || !strings.Contains(out, `delay-too-long.yaml:9:50: error: step "remind" has a delay of 74565h24m16s, longer than the delay ladder holds`) ||
		!strings.Contains(out, "use at most 74565h24m15s") || strings.Contains(out, `"renew"`) {
		t.Errorf("validate a step delay beyond the ladder: exit %d, output %q", code, out)
	}
	url := testenv.VHost(t)
	send := func(flag, value string) (string, int) {
		_, errOut, code := cli(t, "send", "--exchange", "x", "--routing-key", "k", "--data", `{}`, flag, value, "--amqp", url)
		return errOut, code
	}
	beyond, within := spec.MaxDelay+time.Minute, spec.MaxDelay-time.Minute
	for _, tc := range []struct{ flag, beyond, within string }{
		{"--in", beyond.String(), within.String()},
		{"--at", time.Now().Add(beyond).UTC().Format(time.RFC3339), time.Now().Add(within).UTC().Format(time.RFC3339)},
	} {
		if errOut, code := send(tc.flag, tc.beyond); code != 1 || !strings.Contains(errOut, "longer than the delay ladder holds") {
			t.Errorf("send %s %s: exit %d, stderr %q; want exit 1 saying the ladder holds less", tc.flag, tc.beyond, code, errOut)
		}
		if errOut, code := send(tc.flag, tc.within); code != 1 || strings.Contains(errOut, "longer than") || !strings.Contains(errOut, "not declared") {
			t.Errorf("send %s %s: exit %d, stderr %q; want it taken, and refused only for the ladder not declared on this vhost", tc.flag, tc.within, code, errOut)
		}
	}
}
