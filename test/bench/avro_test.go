package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/test/testenv"
)

const avroHopFlow = `version: acemq.flow/v1
name: bench
types:
  Doc: {avro: {type: record, name: Doc, fields: [{name: id, type: string}, {name: n, type: long}, {name: note, type: string}]}}
plugins:
  testkit: {command: TESTKIT}
pipelines:
  - name: PIPE
    input: Doc
    steps:
      - {name: a, handler: testkit.noop, output: Doc, prefetch: 256, concurrency: 1, retry: {max_attempts: 1}, auto_startup: false}
      - {name: b, handler: testkit.echo, auto_startup: false}
`

// BenchmarkHopAvro prints hop-avro: the in-process no-op hop of
// BenchmarkHop with an Avro type in and out, so that each message is
// decoded from the Confluent framing by its writer's id (looked up once,
// then cached), checked, handed to the handler as JSON, and its output
// encoded again with the type's id. The messages are 1 KiB of Avro. Each
// round runs the raw hop, hop-inprocess, the raw hop again and hop-avro;
// the line gives hop-avro's ratio against its raw run (ratio, as every hop
// figure) and against hop-inprocess in the same round (vs_inprocess, the
// DESIGN.md target). ACEMQ_BENCH_ONLY=avro runs it alone.
func BenchmarkHopAvro(b *testing.B) {
	if only := os.Getenv("ACEMQ_BENCH_ONLY"); only != "" && only != "avro" {
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
	var raws, inprocs, avros, ratios, vsInproc []float64
	n := 0
	rawRound := func(r int) float64 {
		n++
		src, dst := fmt.Sprintf("avraw%d-%d.src", r, n), fmt.Sprintf("avraw%d-%d.dst", r, n)
		quorum(b, ch, src)
		quorum(b, ch, dst)
		fill(b, ch, "", src, messages)
		v := rawHop(b, url, src, dst, messages, false)
		drop(b, ch, src)
		drop(b, ch, dst)
		return v
	}
	for r := range rounds + 1 {
		raw1 := rawRound(r)
		inproc := runtimeHop(b, url, fmt.Sprintf("avinproc%d", r), "testkit.noop", testkit, true, nil, 1, messages)
		raw2 := rawRound(r)
		v := avroHop(b, url, fmt.Sprintf("avro%d", r), testkit, messages)
		if verbose {
			fmt.Printf("bench: round %d hop-avro %.0f msgs/s raw=%.0f inprocess=%.0f (raw %.0f) warm-up=%v\n", r, v, raw2, inproc, raw1, r == 0)
		}
		if r == 0 {
			continue
		}
		raws, inprocs, avros = append(raws, raw2), append(inprocs, inproc), append(avros, v)
		ratios, vsInproc = append(ratios, v/raw2), append(vsInproc, v/inproc)
	}
	fmt.Printf("bench: hop-avro %.0f msgs/s raw=%.0f ratio=%.2f spread=%.2f–%.2f inprocess=%.0f vs_inprocess=%.2f\n",
		median(avros), median(raws), median(ratios), slices.Min(ratios), slices.Max(ratios), median(inprocs), median(vsInproc))
}

// avroHop is runtimeHop's in-process hop with Avro in and out: the step
// queue is filled with n Confluent-framed messages of 1 KiB, written with
// the id the registry gives the flow's type, and the clock runs while the
// step moves them to the next step's queue.
func avroHop(b *testing.B, url, pipe, testkit string, n int) float64 {
	flow := strings.NewReplacer("PIPE", pipe, "TESTKIT", testkit).Replace(avroHopFlow)
	pl := compileFlow(b, flow)
	reg, err := memory.Open(stores.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Close()
	doc := pl.Consumers[0].File.Type("Doc")
	payload := fmt.Sprintf(`{"id":"doc","n":42,"note":%q}`, strings.Repeat("x", 1000))
	framed, _, err := codec.New(reg, codec.Options{}).Encode(context.Background(), doc, []byte(payload))
	if err != nil {
		b.Fatal(err)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	declare(b, ch, pl)
	fillWith(b, ch, pipe, "a", n, framed, codec.ContentType)
	opts := runtime.Options{AMQPURL: url, Registry: reg, Handlers: map[string]runtime.HandlerFunc{
		"testkit.noop": func(_ context.Context, r runtime.Request) (decide.Result, error) {
			return decide.Result{Payload: r.Payload}, nil
		}}}
	rt, ctx, stop := runRuntime(b, pl, opts)
	if err := rt.Start(ctx, pipe+".a"); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	end := waitDepth(b, ch, pipe+".b", n, 5*time.Minute)
	stop()
	// What the step published is Avro: the hop encoded, not passed JSON on.
	d, ok, err := ch.Get(pipe+".b", true)
	if err != nil || !ok || d.ContentType != codec.ContentType {
		b.Fatalf("the next step's queue holds content type %q (%v, %v), want Avro", d.ContentType, ok, err)
	}
	for _, q := range pl.Queues {
		drop(b, ch, q.Name)
	}
	return float64(n) / end.Sub(start).Seconds()
}

// fillWith publishes n copies of body, of contentType, with pipelined
// confirms.
func fillWith(b *testing.B, ch *amqp.Channel, exchange, key string, n int, body []byte, contentType string) {
	b.Helper()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	var pending []*amqp.DeferredConfirmation
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, key, false, false,
			amqp.Publishing{MessageId: fmt.Sprint(i), ContentType: contentType, Body: body, DeliveryMode: amqp.Persistent})
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
