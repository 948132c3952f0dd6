package main

import (
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/queuetest"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestReplayCommandUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no queue", []string{"replay"}, "name one queue"},
		{"two queues", []string{"replay", "a.dlq", "b.dlq"}, "name one queue"},
		{"a negative limit", []string{"replay", "a.dlq", "--limit", "-1"}, "--limit"},
		{"no replay allowed", []string{"replay", "a.dlq", "--max-replays", "0"}, "--max-replays"},
		{"an unknown flag", []string{"replay", "a.dlq", "--force"}, "unknown flag"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := cli(t, tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("acemq-flow %s: exit %d, stdout %q, stderr %q; want exit 2 and %q on stderr",
					strings.Join(tc.args, " "), code, out, errOut, tc.want)
			}
		})
	}
}

func TestReplayCommandMovesMessagesBack(t *testing.T) {
	e := queuetest.New(t)
	target := e.Queue("orders.charge")
	dlq := e.Queue("orders.charge.dlq")
	e.Queue("orders.charge.parked")
	e.Put(dlq, "m-1", amqp.Table{plan.HeaderAttempt: int64(5), plan.HeaderError: "boom"}, `{}`)
	e.Put(dlq, "m-2", amqp.Table{plan.HeaderAttempt: int64(5), plan.HeaderReplays: int64(3)}, `{}`)

	out, errOut, code := cli(t, "replay", dlq, "--dry-run", "--amqp", e.URL)
	if code != 0 {
		t.Fatalf("replay --dry-run: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{
		`would move message "m-1" to "` + target + `" (replay 1)`,
		`would park message "m-2" in "` + target + `.parked"`,
		"nothing moved",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay --dry-run stdout lacks %q:\n%s", want, out)
		}
	}
	e.WaitDepth(dlq, 2)

	out, errOut, code = cli(t, "replay", dlq, "--amqp", e.URL)
	if code != 0 {
		t.Fatalf("replay: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{
		`moved 1 message(s) to "` + target + `"`,
		`parked 1 message(s) in "` + target + `.parked"`,
		`replayed from "` + dlq + `": 1 moved, 1 parked, 0 left`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay stdout lacks %q:\n%s", want, out)
		}
	}
	// stderr is not a terminal here: no bar, one final line.
	if want := "replay " + dlq + ": 2 of 2 message(s) handled\n"; errOut != want {
		t.Errorf("replay stderr = %q, want %q", errOut, want)
	}
	e.WaitDepth(dlq, 0)
	e.WaitDepth(target, 1)
}

func TestReplayCommandToAMissingQueueFails(t *testing.T) {
	e := queuetest.New(t)
	dlq := e.Queue("orders.charge.dlq")
	e.Put(dlq, "m-1", amqp.Table{plan.HeaderAttempt: int64(5)}, `{}`)

	out, errOut, code := cli(t, "replay", dlq, "--to", e.NS+".nowhere", "--amqp", e.URL)
	if code != 1 || !strings.Contains(errOut, `queue "`+e.NS+`.nowhere" does not exist`) || !strings.Contains(errOut, `"m-1"`) {
		t.Errorf("replay --to a missing queue: exit %d, stderr %q; want exit 1 naming the queue and the message", code, errOut)
	}
	if !strings.Contains(out, "0 moved, 0 parked, 1 left") {
		t.Errorf("replay --to a missing queue: stdout %q, want the summary with 1 left", out)
	}
	e.WaitDepth(dlq, 1)
}

func TestReplayCommandNeverShowsThePassword(t *testing.T) {
	_, errOut, code := cli(t, "replay", "x.dlq", "--amqp", "amqp://guest:s3cret-pw@127.0.0.1:port/")
	if code != 1 || strings.Contains(errOut, "s3cret-pw") || !strings.Contains(errOut, "invalid AMQP URL") {
		t.Errorf("replay with a bad URL: exit %d, stderr %q; want exit 1 without the password", code, errOut)
	}
}
