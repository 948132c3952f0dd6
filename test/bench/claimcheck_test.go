package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
	"github.com/acemq/acemq-flow/test/testenv"
)

const claimCheckFlow = `version: acemq.flow/v1
name: bench
plugins:
  testkit: {command: TESTKIT}
pipelines:
  - name: PIPE
    steps:
      - {name: a, handler: testkit.echo, retry: {max_attempts: 1}}
      - {name: b, handler: testkit.echo, retry: {max_attempts: 1}}
      - {name: c, handler: testkit.echo, retry: {max_attempts: 1}}
`

// claimCheckMessages is how many 10 MiB messages a round moves.
const claimCheckMessages = 8

// BenchmarkClaimCheck prints claim-check-10mib: MiB/s of 10 MiB payloads
// through a three-step pipeline of the testkit plugin's echo, each step
// fetching its input from the file: blob store (checking its SHA-256),
// calling the plugin with the whole payload and putting its result back,
// every queue holding only the reference. A round sends 8 payloads, each
// its own blob, put and published as `send` does, and ends when the last
// step's 8 claim-checked replies are in; the figure is the median of five
// rounds after a warm-up. ACEMQ_BENCH_ONLY=claim-check runs it alone.
func BenchmarkClaimCheck(b *testing.B) {
	if only := os.Getenv("ACEMQ_BENCH_ONLY"); only != "" && only != "claim-check" {
		b.Skip("ACEMQ_BENCH_ONLY=" + only)
	}
	url := testenv.VHost(b)
	testkit := buildTestkit(b)
	blobs, err := storeurl.OpenBlobs(context.Background(), "file:"+filepath.Join(b.TempDir(), "blobs"), stores.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer blobs.Close()
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	var rates []float64
	for r := range rounds + 1 {
		pipe := fmt.Sprintf("cc%d", r)
		flow := strings.NewReplacer("PIPE", pipe, "TESTKIT", testkit).Replace(claimCheckFlow)
		pl := compileFlow(b, flow)
		replies := pipe + ".replies"
		if _, err := ch.QueueDeclare(replies, false, true, false, false, nil); err != nil {
			b.Fatal(err)
		}
		got, err := ch.Consume(replies, "", true, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		_, ctx, stop := runRuntime(b, pl, runtime.Options{AMQPURL: url, Blobs: blobs})
		payloads := make([][]byte, claimCheckMessages)
		for i := range payloads {
			// Each its own blob: a shared one would be put once.
			payloads[i] = []byte(fmt.Sprintf(`{"round":%d,"n":%d,"blob":"%s"}`, r, i, strings.Repeat("x", 10<<20-64)))
		}
		start := time.Now()
		for _, p := range payloads {
			msg, err := decide.FirstMessage(pl, decide.Target{Pipeline: pipe}, p, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			msg.ReplyTo = replies
			if msg, _, err = ops.ClaimCheck(ctx, blobs, msg, ops.FirstClaimCheckAbove(pl, decide.Target{Pipeline: pipe})); err != nil {
				b.Fatal(err)
			}
			m := wire.Publishing(msg)
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, m.Exchange, m.RoutingKey, true, false, m.Publishing)
			if err != nil {
				b.Fatal(err)
			}
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				b.Fatalf("publish not confirmed: %v", err)
			}
		}
		deadline := time.After(5 * time.Minute)
		for n := 0; n < claimCheckMessages; n++ {
			select {
			case d := <-got:
				if d.Headers[decide.HeaderClaimCheck] == nil || len(d.Body) > 512 {
					b.Fatalf("a reply of %d bytes without a claim check: the 10 MiB travelled inline", len(d.Body))
				}
			case <-deadline:
				b.Fatalf("%d of %d payloads through the pipeline after 5m", n, claimCheckMessages)
			}
		}
		rate := float64(claimCheckMessages*10) / time.Since(start).Seconds()
		stop()
		for _, q := range pl.Queues {
			drop(b, ch, q.Name)
		}
		if verbose {
			fmt.Printf("bench: round %d claim-check-10mib %.1f MiB/s warm-up=%v\n", r, rate, r == 0)
		}
		if r > 0 {
			rates = append(rates, rate)
		}
	}
	fmt.Printf("bench: claim-check-10mib %.1f MiB/s spread=%.1f–%.1f\n", median(rates), slices.Min(rates), slices.Max(rates))
}
