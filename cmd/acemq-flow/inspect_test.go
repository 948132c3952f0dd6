package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/queuetest"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestInspectCommandUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no queue", []string{"inspect"}, "name one queue"},
		{"two queues", []string{"inspect", "a", "b"}, "name one queue"},
		{"a negative limit", []string{"inspect", "a", "--limit", "-2"}, "--limit"},
		{"an unknown format", []string{"inspect", "a", "--format", "yaml"}, "--format must be text or json"},
		{"a limit that is not a number", []string{"inspect", "a", "--limit", "ten"}, "invalid argument"},
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

func TestInspectCommandShowsMessagesAndKeepsThem(t *testing.T) {
	e := queuetest.New(t)
	dlq := e.Queue("orders.charge.dlq")
	e.Put(dlq, "m-1", amqp.Table{
		plan.HeaderAttempt: int64(5), plan.HeaderErrorKind: "exhausted", plan.HeaderError: "card declined",
		plan.HeaderRoute: "validate,reserve,dispatch", plan.HeaderRoutePosition: int64(1),
	}, `{"order":1}`)
	e.Put(dlq, "m-2", amqp.Table{plan.HeaderSlip: `{"steps":[{"exchange":"x","routingKey":"ship","name":"ship"}],` +
		`"done":[{"exchange":"x","routingKey":"charge","name":"charge","completedAt":"2026-09-09T14:03:12Z"}]}`}, `{}`)

	out, errOut, code := cli(t, "inspect", dlq, "--limit", "1", "--amqp", e.URL)
	if code != 0 {
		t.Fatalf("inspect: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{
		"queue " + dlq + ": 2 message(s), showing the first 1",
		"1. message m-1",
		"attempt 5, replays 0",
		"error (exhausted): card declined",
		"route validate,[reserve],dispatch",
		`payload (11 bytes): {"order":1}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect stdout lacks %q:\n%s", want, out)
		}
	}
	e.WaitDepth(dlq, 2)

	out, errOut, code = cli(t, "inspect", dlq, "--format", "json", "--amqp", e.URL)
	if code != 0 {
		t.Fatalf("inspect --format json: exit %d, stderr %s", code, errOut)
	}
	var view ops.QueueView
	if err := json.Unmarshal([]byte(out), &view); err != nil {
		t.Fatalf("inspect --format json printed no JSON document (%v):\n%s", err, out)
	}
	if view.Depth != 2 || len(view.Messages) != 2 || view.Messages[1].SlipText != "charge ✓ 14:03:12 → [ship]" {
		t.Errorf("inspect --format json = %+v", view)
	}
	e.WaitDepth(dlq, 2)

	_, errOut, code = cli(t, "inspect", e.NS+".absent", "--amqp", e.URL)
	if code != 1 || !strings.Contains(errOut, "does not exist") {
		t.Errorf("inspect of a missing queue: exit %d, stderr %q; want exit 1 saying it does not exist", code, errOut)
	}
}

func TestInspectTextEscapesHeaders(t *testing.T) {
	var b bytes.Buffer
	renderInspectText(&b, ops.QueueView{Queue: "q.dlq", Depth: 1, Messages: []ops.MessageView{{
		MessageID: "m-1", Attempt: 2, Error: "bad\x1b[31m red", DeathReason: "rejected",
		FailedQueue: "q", FailedAt: "2026-09-09T14:03:15Z", Size: 300, Preview: "abc", Truncated: true,
	}}})
	want := `queue q.dlq: 1 message(s)

1. message m-1
   attempt 2, replays 0
   error (): bad\u001b[31m red
   failed in q at 2026-09-09T14:03:15Z
   payload (300 bytes): abc …
`
	if b.String() != want {
		t.Errorf("renderInspectText =\n%s\nwant\n%s", b.String(), want)
	}
}
