package main

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/test/testenv"
)

// dlqEnv is a broker connection for one CLI test, with queues of its own
// deleted when the test ends.
type dlqEnv struct {
	t   *testing.T
	url string
	ns  string
	top *broker.Topology
	pub *broker.Publisher
}

func newDLQEnv(t *testing.T) *dlqEnv {
	t.Helper()
	url := testenv.AMQP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, url, broker.ConnOptions{Name: "acemq-flow test " + t.Name()})
	if err != nil {
		t.Fatalf("broker.Open: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	top := broker.NewTopology(conn, nil)
	t.Cleanup(func() { top.Close() })
	pub, err := broker.OpenPublisher(ctx, conn, broker.PublisherOptions{})
	if err != nil {
		t.Fatalf("OpenPublisher: %v", err)
	}
	t.Cleanup(func() { pub.Close() })
	return &dlqEnv{t: t, url: url, ns: testenv.Names(t), top: top, pub: pub}
}

func (e *dlqEnv) queue(name string) string {
	e.t.Helper()
	full := e.ns + "." + name
	if err := e.top.DeclareQueue(e.t.Context(), broker.Queue{Name: full, Durable: true, Args: map[string]any{"x-queue-type": "classic"}}); err != nil {
		e.t.Fatalf("declare queue %q: %v", full, err)
	}
	e.t.Cleanup(func() { _, _ = e.top.DeleteQueue(context.Background(), full) })
	return full
}

func (e *dlqEnv) put(queue, id string, headers amqp.Table, body string) {
	e.t.Helper()
	err := e.pub.Publish(e.t.Context(), broker.Message{RoutingKey: queue, Publishing: amqp.Publishing{
		MessageId: id, ContentType: "application/json", Headers: headers, Body: []byte(body)}})
	if err != nil {
		e.t.Fatalf("publish %q to %q: %v", id, queue, err)
	}
}

func (e *dlqEnv) waitDepth(queue string, want int) {
	e.t.Helper()
	testenv.Eventually(e.t, 10*time.Second, func() error {
		n, err := e.top.Depth(e.t.Context(), queue)
		if err != nil {
			return err
		}
		if n != want {
			return testenv.Errorf("queue %q holds %d message(s), want %d", queue, n, want)
		}
		return nil
	})
}

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
	e := newDLQEnv(t)
	target := e.queue("orders.charge")
	dlq := e.queue("orders.charge.dlq")
	e.queue("orders.charge.parked")
	e.put(dlq, "m-1", amqp.Table{runtime.HeaderAttempt: int64(5), runtime.HeaderError: "boom"}, `{}`)
	e.put(dlq, "m-2", amqp.Table{runtime.HeaderAttempt: int64(5), runtime.HeaderReplays: int64(3)}, `{}`)

	out, errOut, code := cli(t, "replay", dlq, "--dry-run", "--amqp", e.url)
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
	e.waitDepth(dlq, 2)

	out, errOut, code = cli(t, "replay", dlq, "--amqp", e.url)
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
	e.waitDepth(dlq, 0)
	e.waitDepth(target, 1)
}

func TestReplayCommandToAMissingQueueFails(t *testing.T) {
	e := newDLQEnv(t)
	dlq := e.queue("orders.charge.dlq")
	e.put(dlq, "m-1", amqp.Table{runtime.HeaderAttempt: int64(5)}, `{}`)

	out, errOut, code := cli(t, "replay", dlq, "--to", e.ns+".nowhere", "--amqp", e.url)
	if code != 1 || !strings.Contains(errOut, `queue "`+e.ns+`.nowhere" does not exist`) || !strings.Contains(errOut, `"m-1"`) {
		t.Errorf("replay --to a missing queue: exit %d, stderr %q; want exit 1 naming the queue and the message", code, errOut)
	}
	if !strings.Contains(out, "0 moved, 0 parked, 1 left") {
		t.Errorf("replay --to a missing queue: stdout %q, want the summary with 1 left", out)
	}
	e.waitDepth(dlq, 1)
}

func TestReplayCommandNeverShowsThePassword(t *testing.T) {
	_, errOut, code := cli(t, "replay", "x.dlq", "--amqp", "amqp://guest:s3cret-pw@127.0.0.1:port/")
	if code != 1 || strings.Contains(errOut, "s3cret-pw") || !strings.Contains(errOut, "invalid AMQP URL") {
		t.Errorf("replay with a bad URL: exit %d, stderr %q; want exit 1 without the password", code, errOut)
	}
}
