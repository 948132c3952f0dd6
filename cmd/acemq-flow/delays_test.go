package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestSendInDelaysAndInspect: without a ladder, send --in and delays say
// that no runtime has declared it; once a runtime has, a message sent with
// --in 1h waits in level 11 (3600 s: digits 11, 10, 9, 4), delays shows it at
// that level's head with its due time and destination, and inspect shows
// both.
func TestSendInDelaysAndInspect(t *testing.T) {
	url := testenv.VHost(t)
	send := []string{"send", "--exchange", "amq.topic", "--routing-key", "later", "--data", `{"n":1}`, "--in", "1h", "--amqp", url}
	if _, errOut, code := cli(t, send...); code != 1 || !strings.Contains(errOut, "the delay ladder") || !strings.Contains(errOut, "not declared") {
		t.Errorf("send --in without a ladder: exit %d, stderr %q; want exit 1 naming the ladder", code, errOut)
	}
	if _, errOut, code := cli(t, "delays", "--amqp", url); code != 1 || !strings.Contains(errOut, "not declared") {
		t.Errorf("delays without a ladder: exit %d, stderr %q; want exit 1 saying it is not declared", code, errOut)
	}
	if _, errOut, code := cli(t, "send", "--exchange", "x", "--routing-key", "k", "--in", "1h", "--at", "2030-01-01T00:00:00Z", "--amqp", url); code != 2 {
		t.Errorf("send --in with --at: exit %d (%s), want 2", code, errOut)
	}
	if _, errOut, code := cli(t, "send", "--exchange", "x", "--routing-key", "k", "--in", "300000000s", "--amqp", url); code != 1 || !strings.Contains(errOut, "longer than the delay ladder holds") {
		t.Errorf("send --in beyond the ladder: exit %d, stderr %q", code, errOut)
	}

	runtimetest.Run(t, url, &plan.Plan{}, runtime.Options{Delays: true})
	_, errOut, code := cli(t, send...)
	if code != 0 || !strings.Contains(errOut, "into the delay ladder, due at") || !strings.Contains(errOut, `for exchange "amq.topic" with key "later"`) {
		t.Fatalf("send --in 1h: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code := cli(t, "delays", "--amqp", url, "--format", "json")
	if code != 0 {
		t.Fatalf("delays: exit %d, stderr %s", code, errOut)
	}
	var view ops.LadderView
	if err := json.Unmarshal([]byte(out), &view); err != nil {
		t.Fatalf("delays --format json: %v\n%s", err, out)
	}
	if len(view.Levels) != plan.LadderLevels || view.DueConsumers != 1 || view.Unroutable != 0 || !view.Complete {
		t.Errorf("delays: %d levels, %d consumers of .due, %d unroutable, complete %v", len(view.Levels), view.DueConsumers, view.Unroutable, view.Complete)
	}
	for _, l := range view.Levels {
		want := 0
		if l.Level == 11 {
			want = 1
		}
		if l.Depth != want {
			t.Errorf("level %d holds %d message(s), want %d", l.Level, l.Depth, want)
		}
	}
	l11 := view.Levels[11]
	if l11.HeadDestination != "amq.topic/later" || !strings.HasSuffix(l11.HeadDueAt, "Z") || l11.Wait != "34m8s" {
		t.Errorf("level 11: %+v", l11)
	}
	out, _, code = cli(t, "delays", "--amqp", url)
	if code != 0 || !strings.Contains(out, "acemq.schedule.11") || !strings.Contains(out, "amq.topic/later") || !strings.Contains(out, "unroutable: 0") {
		t.Errorf("delays (text): exit %d\n%s", code, out)
	}
	// What delays read goes back to the level as its channel closes, a
	// moment after it returns.
	testenv.Eventually(t, 5*time.Second, func() error {
		out, _, code := cli(t, "inspect", "acemq.schedule.11", "--amqp", url)
		if code != 0 || !strings.Contains(out, `delayed: due at `+l11.HeadDueAt+`, for exchange "amq.topic" with key "later"`) {
			return testenv.Errorf("inspect acemq.schedule.11: exit %d\n%s", code, out)
		}
		return nil
	})
	// Read, and given back: still there.
	if _, _, code := cli(t, "delays", "--amqp", url); code != 0 {
		t.Fatal("delays failed the second time")
	}
	// The broker takes them back as the commands' channels close, a moment
	// after they exit.
	testenv.Eventually(t, 5*time.Second, func() error {
		out, _, _ := cli(t, "inspect", "acemq.schedule.11", "--limit", "0", "--amqp", url)
		if !strings.Contains(out, "1 message(s)") {
			return testenv.Errorf("after delays and inspect, level 11 holds: %s", out)
		}
		return nil
	})
}
