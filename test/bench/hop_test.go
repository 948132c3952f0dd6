// Package bench measures the runtime against raw amqp091-go on the same
// broker in the same run, and prints one line per figure:
//
//	bench: <name> <value> <unit>[ raw=<value> ratio=<x.xx>]
//
//	bench: <name> <value> <unit> raw=<value> ratio=<x.xx> spread=<min>–<max>
//
// Figures are medians of five rounds, after a warm-up round that is not
// counted (the first run of each kind pays for connections, plugin start and
// the broker's first queues). A ratio is the median of the rounds' ratios,
// each of a run against the raw run just before it (raw, ours, raw, ours…,
// each on fresh queues): the machine's speed drifts (other tenants, the
// broker's own housekeeping) by more than the differences measured, and a
// pair run back to back shares the drift. spread is the lowest and highest
// of those ratios. ACEMQ_BENCH_MESSAGES sets the messages per run (20,000:
// a run lasts seconds, not a fraction of one). Run with `make bench`.
package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
	"github.com/acemq/acemq-flow/test/testenv"
)

const (
	prefetch = 256
	rounds   = 5
)

// messages is how many messages each run moves (ACEMQ_BENCH_MESSAGES).
var messages = func() int {
	if n, err := strconv.Atoi(os.Getenv("ACEMQ_BENCH_MESSAGES")); err == nil && n > 0 {
		return n
	}
	return 20000
}()

var body = make([]byte, 1024)

// verbose (ACEMQ_BENCH_VERBOSE=1) prints every round, warm-up included.
var verbose = os.Getenv("ACEMQ_BENCH_VERBOSE") != ""

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// fill publishes n messages to queue with pipelined confirms.
func fill(b *testing.B, ch *amqp.Channel, exchange, key string, n int) {
	b.Helper()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	var pending []*amqp.DeferredConfirmation
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, key, false, false,
			amqp.Publishing{MessageId: fmt.Sprint(i), Body: body, DeliveryMode: amqp.Persistent})
		if err != nil {
			b.Fatal(err)
		}
		pending = append(pending, dc)
		if len(pending) == 512 {
			for _, p := range pending {
				p.Wait()
			}
			pending = pending[:0]
		}
	}
	for _, p := range pending {
		p.Wait()
	}
}

// waitDepth waits until queue holds n ready messages and returns when.
func waitDepth(b *testing.B, ch *amqp.Channel, queue string, n int, d time.Duration) time.Time {
	b.Helper()
	end := time.Now().Add(d)
	for {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		if q.Messages >= n {
			return time.Now()
		}
		if time.Now().After(end) {
			b.Fatalf("%s holds %d of %d after %s", queue, q.Messages, n, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func quorum(b *testing.B, ch *amqp.Channel, name string) {
	b.Helper()
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		b.Fatal(err)
	}
}

// rawHop is the limit: consume from src, publish to dst with a confirm,
// acknowledge the input when the output's confirm arrives, many in flight.
// With headers, each output carries the properties and x-acemq headers a
// pipeline step's output carries (FLOW-FORMAT §2), which shows what the
// wire format itself costs the broker: hop-raw-headers, for information.
func rawHop(b *testing.B, url, src, dst string, n int, headers bool) float64 {
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	pubConn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer pubConn.Close()
	cch, _ := conn.Channel()
	pch, _ := pubConn.Channel()
	if err := cch.Qos(prefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	dels, err := cch.Consume(src, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	type inflight struct {
		dc  *amqp.DeferredConfirmation
		tag uint64
	}
	acks := make(chan inflight, prefetch)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range acks {
			f.dc.Wait()
			_ = cch.Ack(f.tag, false)
		}
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		d := <-dels
		out := amqp.Publishing{MessageId: d.MessageId, Body: d.Body, DeliveryMode: amqp.Persistent}
		if headers {
			now := time.Now()
			out.MessageId, out.CorrelationId = decide.NewMessageID(), d.MessageId
			out.ContentType, out.Timestamp = "application/json", now.UTC().Truncate(time.Second)
			out.Headers = amqp.Table{plan.HeaderAttempt: int64(1), plan.HeaderCausationID: d.MessageId,
				plan.HeaderFirstSeen: decide.FormatTime(now), plan.HeaderOrigin: "bench",
				plan.HeaderRoute: "a,b", plan.HeaderRoutePosition: int64(1)}
		}
		dc, err := pch.PublishWithDeferredConfirmWithContext(context.Background(), "", dst, true, false, out)
		if err != nil {
			b.Fatal(err)
		}
		acks <- inflight{dc, d.DeliveryTag}
	}
	close(acks)
	<-done
	return float64(n) / time.Since(start).Seconds()
}

const hopFlow = `version: acemq.flow/v1
name: bench
plugins:
  testkit: {command: TESTKIT}
pipelines:
  - name: PIPE
    steps:
      - {name: a, handler: HANDLER, prefetch: PREFETCH, concurrency: CONC, retry: {max_attempts: 1}, auto_startup: false, idempotent: IDEM}
      - {name: b, handler: testkit.echo, auto_startup: false}
`

// runtimeHop runs the runtime over a pre-filled step queue and measures
// how fast step a moves every message to step b's queue.
// concurrency is the step's, handlers at once on the group's one broker
// consumer: 1 matches the raw hop's single consumer; a plugin or a store
// round trip per message needs more handlers in flight. The step's
// prefetch (per handler) is the raw hop's 256 shared among them, at least
// 16, so that the broker consumer (concurrency × prefetch) has at least 16
// waiting for each handler while the outputs of earlier ones await their
// confirms. The raw hop has no round trip to hide: a prefetch of 512 does
// not make it faster (15–20k msgs/s at 256 and at 512, measured).
func runtimeHop(b *testing.B, url, pipe, handler, testkit string, inprocess bool, store stores.Idempotency, concurrency, n int) float64 {
	flow := hopFlow
	for k, v := range map[string]string{"PIPE": pipe, "HANDLER": handler, "TESTKIT": testkit, "IDEM": fmt.Sprint(store != nil), "CONC": fmt.Sprint(concurrency),
		"PREFETCH": fmt.Sprint(max(prefetch/concurrency, 16))} {
		flow = strings.ReplaceAll(flow, k, v)
	}
	plan := compileFlow(b, flow)
	opts := runtime.Options{AMQPURL: url, Store: store}
	if inprocess {
		opts.Handlers = map[string]runtime.HandlerFunc{handler: func(_ context.Context, r runtime.Request) (decide.Result, error) {
			return decide.Result{Payload: r.Payload}, nil
		}}
	}
	// The topology is declared first and the queue filled, then the runtime
	// started with the step stopped, so that the clock runs only while the
	// step consumes.
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	declare(b, ch, plan)
	fill(b, ch, pipe, "a", n)
	rt, ctx, stop := runRuntime(b, plan, opts)
	// Start declares the step's queues, then subscribes: the clock starts
	// where the raw hop's does, once the consumer is about to subscribe.
	if err := rt.Start(ctx, pipe+".a"); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	end := waitDepth(b, ch, pipe+".b", n, 5*time.Minute)
	stop()
	for _, q := range plan.Queues {
		drop(b, ch, q.Name)
	}
	return float64(n) / end.Sub(start).Seconds()
}

// compileFlow loads one flow file's text and compiles it, as run does.
func compileFlow(b *testing.B, flow string) *plan.Plan {
	b.Helper()
	file := filepath.Join(b.TempDir(), "f.yaml")
	if err := os.WriteFile(file, []byte(flow), 0o644); err != nil {
		b.Fatal(err)
	}
	set, err := spec.LoadPaths(spec.Options{}, file)
	if err != nil {
		b.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		b.Fatal(err)
	}
	return pl
}

// drop deletes a queue once measured, so that every figure starts from the
// same broker: no earlier run's messages held in quorum queues.
func drop(b *testing.B, ch *amqp.Channel, queue string) {
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		b.Fatal(err)
	}
}

func declare(b *testing.B, ch *amqp.Channel, plan *plan.Plan) {
	for _, e := range plan.Exchanges {
		if e.Type != "" {
			if err := ch.ExchangeDeclare(e.Name, e.Type, true, false, false, false, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, q := range plan.Queues {
		if _, err := ch.QueueDeclare(q.Name, true, false, false, false, amqp.Table(q.Arguments)); err != nil {
			b.Fatal(err)
		}
	}
	for _, bd := range plan.Bindings {
		if err := ch.QueueBind(bd.Queue, bd.RoutingKey, bd.Exchange, false, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func buildTestkit(b *testing.B) string {
	out := filepath.Join(b.TempDir(), "testkit")
	cmd := exec.Command("go", "build", "-o", out, "../../examples/plugins/testkit")
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build testkit: %v\n%s", err, o)
	}
	return out
}

// BenchmarkHop prints hop-raw, hop-raw-headers, hop-inprocess, hop-plugin
// and (with PostgreSQL) hop-idempotent, each the median of five runs of
// 20,000 1 KiB messages on quorum queues, prefetch 256, after a warm-up
// round, with its ratio against the raw hop run just before it (the median
// of the five) and the spread of those ratios.
func BenchmarkHop(b *testing.B) {
	if only := os.Getenv("ACEMQ_BENCH_ONLY"); !slices.Contains([]string{"", "inprocess", "plugin", "idempotent"}, only) {
		b.Skip("ACEMQ_BENCH_ONLY=" + only)
	}
	url := testenv.VHost(b)
	testkit := buildTestkit(b)
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	var raw []float64
	runs := map[string]*figure{}
	var order []string
	warm := true // the first round is a warm-up, not counted
	add := func(name string, rawRun, v float64) {
		if verbose {
			fmt.Printf("bench: round %d %s %.0f msgs/s raw=%.0f ratio=%.2f warm-up=%v\n", len(raw), name, v, rawRun, v/rawRun, warm)
		}
		if warm {
			return
		}
		f := runs[name]
		if f == nil {
			f = &figure{}
			runs[name] = f
			order = append(order, name)
		}
		f.values = append(f.values, v)
		f.ratios = append(f.ratios, v/rawRun)
	}
	var store stores.Set
	if os.Getenv(testenv.PostgresEnv) != "" {
		st, err := storeurl.Open(context.Background(), testenv.PostgresSchema(b), stores.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		if err := st.Migrate(context.Background()); err != nil {
			b.Fatal(err)
		}
		store = st
	}
	// ACEMQ_BENCH_ONLY=inprocess|plugin|idempotent runs the raw hop and that
	// one figure only (for profiling).
	only := os.Getenv("ACEMQ_BENCH_ONLY")
	want := func(name string) bool { return only == "" || only == name }
	for r := range rounds + 1 {
		warm = r == 0
		// A raw hop over a pair of fresh queues, deleted once measured.
		n := 0
		rawRound := func(name string, headers bool) float64 {
			n++
			src, dst := fmt.Sprintf("%s%d-%d.src", name, r, n), fmt.Sprintf("%s%d-%d.dst", name, r, n)
			quorum(b, ch, src)
			quorum(b, ch, dst)
			fill(b, ch, "", src, messages)
			v := rawHop(b, url, src, dst, messages, headers)
			drop(b, ch, src)
			drop(b, ch, dst)
			return v
		}
		// Each figure is paired with a raw run just before it.
		pair := func(name string, run func() float64) {
			v := rawRound("raw", false)
			if !warm {
				raw = append(raw, v)
			}
			add(name, v, run())
		}
		if only == "" {
			pair("hop-raw-headers", func() float64 { return rawRound("rawh", true) })
		}
		if want("inprocess") {
			pair("hop-inprocess", func() float64 {
				return runtimeHop(b, url, fmt.Sprintf("inproc%d", r), "testkit.noop", testkit, true, nil, 1, messages)
			})
		}
		if want("plugin") {
			pair("hop-plugin", func() float64 {
				// 64 handlers, as for the store round trip below: more
				// calls in flight share the plugin transport's batches
				// (measured in paired runs: 0.72–0.74 of raw at 32,
				// 0.78–0.85 at 64).
				return runtimeHop(b, url, fmt.Sprintf("plugin%d", r), "testkit.echo", testkit, false, nil, 64, messages)
			})
		}
		if want("idempotent") && store != nil {
			pair("hop-idempotent", func() float64 {
				return runtimeHop(b, url, fmt.Sprintf("idem%d", r), "testkit.noop", testkit, true, store, 64, messages)
			})
		}
	}
	rawM := median(raw)
	fmt.Printf("bench: hop-raw %.0f msgs/s\n", rawM)
	for _, name := range order {
		f := runs[name]
		fmt.Printf("bench: %s %.0f msgs/s raw=%.0f ratio=%.2f spread=%.2f–%.2f\n", name, median(f.values), rawM, median(f.ratios), slices.Min(f.ratios), slices.Max(f.ratios))
	}
}

// figure is one runtime figure's runs, and each one's ratio against the raw
// run paired with it.
type figure struct{ values, ratios []float64 }

// runRuntime starts a runtime of pl with opts and waits until it has
// started; stop ends it and fails b if Run returned an error. ctx is the
// runtime's context, for calls such as Start.
func runRuntime(b *testing.B, pl *plan.Plan, opts runtime.Options) (rt *runtime.Runtime, ctx context.Context, stop func()) {
	b.Helper()
	rt, err := runtime.New(pl, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(ctx) }()
	select {
	case <-rt.Started():
	case err := <-errc:
		cancel()
		b.Fatal(err)
	}
	return rt, ctx, func() {
		cancel()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
}
