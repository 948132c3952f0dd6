package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/test/testenv"
)

func dial(t *testing.T, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "e2e test client"}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// publishN publishes n messages to exchange/key with confirms, each with
// its own id and reply_to = replyTo, and returns the ids.
func publishN(t *testing.T, ch *amqp.Channel, exchange, key, replyTo string, n int, body string) []string {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	var pending []*amqp.DeferredConfirmation
	for i := range n {
		ids[i] = fmt.Sprintf("msg-%d-%d", time.Now().UnixNano(), i)
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, key, true, false, amqp.Publishing{
			MessageId: ids[i], ReplyTo: replyTo, ContentType: "application/json", Body: []byte(body), DeliveryMode: amqp.Persistent,
		})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		pending = append(pending, dc)
		if len(pending) == 200 || i == n-1 {
			for _, p := range pending {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				ok, err := p.WaitContext(ctx)
				cancel()
				if err != nil || !ok {
					t.Fatalf("publish not confirmed: %v", err)
				}
			}
			pending = pending[:0]
		}
	}
	return ids
}

// results consumes replies from queue and reports each distinct
// correlation id (the run's id: the first message's id) with its outcome.
type results struct {
	seen map[string]string
	dups int
	ch   <-chan amqp.Delivery
}

func consumeResults(t *testing.T, ch *amqp.Channel, queue string) *results {
	t.Helper()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &results{seen: map[string]string{}, ch: dels}
}

// until receives results until every id is seen or the deadline passes;
// each is called after every new result.
func (r *results) until(t *testing.T, ids []string, d time.Duration, each func(n int)) {
	t.Helper()
	deadline := time.After(d)
	for len(r.seen) < len(ids) {
		select {
		case m := <-r.ch:
			if _, ok := r.seen[m.CorrelationId]; ok {
				r.dups++
				continue
			}
			r.seen[m.CorrelationId] = fmt.Sprint(m.Headers["x-acemq-outcome"])
			if each != nil {
				each(len(r.seen))
			}
		case <-deadline:
			missing := 0
			for _, id := range ids {
				if _, ok := r.seen[id]; !ok {
					missing++
				}
			}
			t.Fatalf("after %s, %d of %d runs had not completed", d, missing, len(ids))
		}
	}
	for _, id := range ids {
		if _, ok := r.seen[id]; !ok {
			t.Errorf("run %s never completed", id)
		}
	}
}

// atLeast receives results until n distinct runs completed.
func (r *results) atLeast(t *testing.T, n int, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for len(r.seen) < n {
		select {
		case m := <-r.ch:
			if _, ok := r.seen[m.CorrelationId]; ok {
				r.dups++
				continue
			}
			r.seen[m.CorrelationId] = fmt.Sprint(m.Headers["x-acemq-outcome"])
		case <-deadline:
			t.Fatalf("only %d runs completed within %s, want %d", len(r.seen), d, n)
		}
	}
}

func TestExamplePipelineEndToEnd(t *testing.T) {
	url := testenv.VHost(t)
	startRuntime(t, url, "examples/flows/fulfilment.yaml")
	out, errOut, code := cli(t, "send", "examples/flows/fulfilment.yaml", "--amqp", url, "--pipeline", "fulfilment",
		"--data", "@examples/flows/data/order.json", "--wait", "60s")
	if code != 0 || !strings.Contains(errOut, "outcome: completed") {
		t.Fatalf("send --wait: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	_, errOut, code = cli(t, "send", "examples/flows/fulfilment.yaml", "--amqp", url, "--pipeline", "fulfilment",
		"--data", `{"id":"x"}`, "--wait", "10s")
	if code != 1 || !strings.Contains(errOut, "not a valid Order") {
		t.Errorf("send of an invalid order: exit %d, stderr %s; want exit 1 naming the type", code, errOut)
	}
}

const threeSteps = `version: acemq.flow/v1
name: e2e
plugins:
  testkit: {command: TESTKIT}
pipelines:
  - name: hops
    steps:
      - {name: a, handler: testkit.echo, prefetch: 100, concurrency: 4}
      - {name: b, handler: testkit.echo, prefetch: 100, concurrency: 4}
      - {name: c, handler: testkit.echo, prefetch: 100, concurrency: 4}
`

func TestNoMessageLostWhileEveryConnectionIsForceClosed(t *testing.T) {
	url := testenv.VHost(t)
	vhost := testenv.VHostOf(url)
	flow := writeFlow(t, threeSteps)
	p := startRuntime(t, url, flow)
	ch := dial(t, url)
	res := consumeResults(t, ch, "results")
	n := 5000
	if testing.Short() {
		n = 1000
	}
	pubCh := dial(t, url)
	ids := publishN(t, pubCh, "hops", "a", "results", n, `{"k":1}`)
	cuts := 0
	res.until(t, ids, 5*time.Minute, func(done int) {
		if (done == n/5 || done == n/2) && cuts < 2 {
			cuts++
			if closed := testenv.CloseConnections(t, vhost, "acemq-flow"); closed < 2 {
				t.Errorf("cut %d closed %d runtime connections, want both", cuts, closed)
			}
		}
	})
	if cuts != 2 {
		t.Errorf("connections were cut %d times, want 2", cuts)
	}
	if !p.waitLog(t, "connection re-established", 30*time.Second) && !strings.Contains(p.output(), "reconnect") {
		t.Errorf("the runtime never logged a reconnection; log:\n%s", tail(p.output(), 40))
	}
	t.Logf("%d runs completed, %d duplicate replies", len(res.seen), res.dups)
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pluginProcesses counts running processes of the testkit binary.
func pluginProcesses(t *testing.T) []int {
	t.Helper()
	exe := filepath.Join(repo, "bin", "plugins", "testkit")
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && target == exe {
			if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && !strings.Contains(string(stat), ") Z ") {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func TestKill9UnderLoadLosesNothingAndLeavesNoPlugin(t *testing.T) {
	url := testenv.VHost(t)
	flow := writeFlow(t, threeSteps)
	p := startRuntime(t, url, flow)
	ch := dial(t, url)
	res := consumeResults(t, ch, "results")
	ids := publishN(t, dial(t, url), "hops", "a", "results", 2000, `{"k":1}`)
	killed := false
	res.atLeast(t, 300, time.Minute)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = true
	_ = p.wait(t, 30*time.Second)
	testenv.Eventually(t, 10*time.Second, func() error {
		if pids := pluginProcesses(t); len(pids) > 0 {
			return testenv.Errorf("plugin processes %v outlived the runtime killed with -9", pids)
		}
		return nil
	})
	startRuntime(t, url, flow)
	res.until(t, ids, 5*time.Minute, nil)
	if !killed {
		t.Fatal("the runtime was never killed")
	}
	t.Logf("%d runs completed after kill -9 and restart, %d duplicate replies", len(res.seen), res.dups)
}

func TestMissingQueuesAreNamedInOneFailure(t *testing.T) {
	url := testenv.VHost(t)
	flow := `version: acemq.flow/v1
name: e2e
plugins:
  testkit: {command: TESTKIT}
consumers:
  - {id: one, queue: orders.nwe, handler: testkit.echo}
  - {id: two, queue: billing.nwe, handler: testkit.echo}
topology:
  missing_queue: MODE
`
	p := launch(t, url, writeFlow(t, strings.ReplaceAll(flow, "MODE", "fail")))
	err := p.wait(t, time.Minute)
	out := p.output()
	if err == nil {
		t.Fatalf("run started with two missing queues; log:\n%s", out)
	}
	for _, want := range []string{`consumer "one"`, `"orders.nwe", which does not exist`, `consumer "two"`, `"billing.nwe", which does not exist`, "missing_queue: warn"} {
		if !strings.Contains(out, want) {
			t.Errorf("the failure does not say %q:\n%s", want, out)
		}
	}
	w := startRuntime(t, url, writeFlow(t, strings.ReplaceAll(flow, "MODE", "warn")))
	for _, q := range []string{"orders.nwe", "billing.nwe"} {
		if !strings.Contains(w.output(), "queue="+q) || !strings.Contains(w.output(), "consumer left stopped") {
			t.Errorf("warn mode did not log queue %s as missing:\n%s", q, w.output())
		}
	}
	if !strings.Contains(w.output(), "consumers=0") {
		t.Errorf("warn mode started consumers on missing queues:\n%s", w.output())
	}
}

func TestDriftIsReportedInWords(t *testing.T) {
	url := testenv.VHost(t)
	ch := dial(t, url)
	if _, err := ch.QueueDeclare("audit.log", true, false, false, false, amqp.Table{"x-queue-type": "classic"}); err != nil {
		t.Fatal(err)
	}
	p := launch(t, url, writeFlow(t, `version: acemq.flow/v1
name: e2e
plugins:
  testkit: {command: TESTKIT}
consumers:
  - {id: audit, queue: audit.log, handler: testkit.echo, declare: {type: quorum}}
`))
	if err := p.wait(t, time.Minute); err == nil {
		t.Fatal("run started over a queue that exists with other settings")
	}
	if !strings.Contains(p.output(), `queue "audit.log" exists on the broker`) || !strings.Contains(p.output(), "delete the queue or declare it as it is") {
		t.Errorf("the drift is not said in words:\n%s", p.output())
	}
}

func TestDryRunDeclaresNothing(t *testing.T) {
	url := testenv.VHost(t)
	p := launch(t, url, writeFlow(t, `version: acemq.flow/v1
name: e2e
plugins:
  testkit: {command: TESTKIT}
pipelines:
  - name: dry
    steps:
      - {name: a, handler: testkit.echo}
topology:
  apply: dry-run
`))
	if err := p.wait(t, time.Minute); err == nil {
		t.Fatal("dry-run started consumers on queues it did not declare")
	}
	if !strings.Contains(p.output(), `"dry.a", which does not exist`) {
		t.Errorf("dry-run does not name the missing queue:\n%s", p.output())
	}
	ch := dial(t, url)
	if _, err := ch.QueueDeclarePassive("dry.a", true, false, false, false, nil); err == nil {
		t.Error("dry-run declared queue dry.a")
	}
}

const sleeper = `version: acemq.flow/v1
name: e2e
plugins:
  testkit: {command: TESTKIT}
pipelines:
  - name: slow
    steps:
      - {name: nap, handler: testkit.sleep}
`

// unacked returns the queue's messages delivered and not acknowledged.
func unacked(t *testing.T, vhost, queue string) int {
	t.Helper()
	out := testenv.Rabbitmqctl(t, "list_queues", "-p", vhost, "-q", "--no-table-headers", "name", "messages_unacknowledged", "messages_ready")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == queue {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

func TestDrainLetsAHandlerInFlightFinish(t *testing.T) {
	url := testenv.VHost(t)
	p := startRuntime(t, url, "--drain-timeout", "30s", writeFlow(t, sleeper))
	ch := dial(t, url)
	res := consumeResults(t, ch, "results")
	ids := publishN(t, dial(t, url), "slow", "nap", "results", 1, `{"ms": 5000}`)
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := unacked(t, testenv.VHostOf(url), "slow.nap"); n != 1 {
			return testenv.Errorf("slow.nap has %d unacknowledged, want the one in flight", n)
		}
		return nil
	})
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("the runtime exited with %v after SIGTERM, want 0; log:\n%s", err, tail(p.output(), 30))
	}
	res.until(t, ids, 10*time.Second, nil)
	if !strings.Contains(p.output(), "consumer drained") {
		t.Errorf("no drain in the log:\n%s", tail(p.output(), 30))
	}
}

func TestDrainTimeoutSaysWhatWasLeftForRedelivery(t *testing.T) {
	url := testenv.VHost(t)
	p := startRuntime(t, url, "--drain-timeout", "1s", writeFlow(t, sleeper))
	publishN(t, dial(t, url), "slow", "nap", "", 1, `{"ms": 20000}`)
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := unacked(t, testenv.VHostOf(url), "slow.nap"); n != 1 {
			return testenv.Errorf("slow.nap has %d unacknowledged, want the one in flight", n)
		}
		return nil
	})
	_ = p.stop(t, syscall.SIGTERM)
	if !strings.Contains(p.output(), `msg="consumer drained with messages still in flight after the drain timeout; they will be redelivered" flow=e2e consumer=slow.nap queue=slow.nap left_for_redelivery=1 drain_timeout=1s`) {
		t.Errorf("the drain line is missing:\n%s", tail(p.output(), 30))
	}
	ch := dial(t, url)
	q, err := ch.QueueDeclarePassive("slow.nap", true, false, false, false, amqp.Table{})
	if err != nil || q.Messages != 1 {
		t.Errorf("slow.nap holds %d ready messages (err %v), want the one left for redelivery", q.Messages, err)
	}
}
