package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/testenv"
)

// The latency figures feed a 3-hop chain at a fixed rate and time each
// message from its publish to its arrival in the queue after the third hop:
// latency-3hop-p50 and latency-3hop-p99, in milliseconds, against a raw
// amqp091-go chain over the same queue type, prefetch and confirms in the
// same run (ratio = ours / raw: lower is better).
const (
	latencyRate     = 500 // messages per second, fed at a fixed pace
	latencyPrefetch = 64
	latencyRounds   = 3
)

// latencyDuration is how long each run feeds its chain
// (ACEMQ_BENCH_LATENCY_SECONDS, 20 by default).
var latencyDuration = func() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("ACEMQ_BENCH_LATENCY_SECONDS")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 20 * time.Second
}()

// stamp is the body of a latency message: when it was published, in
// nanoseconds of this process's clock, and padding to 1 KiB as the hops'.
type stamp struct {
	Sent int64  `json:"sent"`
	Pad  string `json:"pad"`
}

var pad = strings.Repeat("x", 1000)

// feed publishes to exchange/key at latencyRate for latencyDuration with
// pipelined confirms (a publish does not wait for the one before), and
// returns how many it published. Each body carries its publish time.
func feed(b *testing.B, url, exchange, key string, dur time.Duration) int {
	b.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	n := int(dur.Seconds() * latencyRate)
	every := time.Second / latencyRate
	start := time.Now()
	var pending []*amqp.DeferredConfirmation
	for i := range n {
		// A fixed pace: message i leaves at start + i × every, however
		// long the publishes before it took.
		if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
			time.Sleep(d)
		}
		body, _ := json.Marshal(stamp{Sent: time.Now().UnixNano(), Pad: pad})
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, key, true, false,
			amqp.Publishing{MessageId: fmt.Sprint(i), ContentType: "application/json", Body: body, DeliveryMode: amqp.Persistent})
		if err != nil {
			b.Fatal(err)
		}
		pending = append(pending, dc)
	}
	for _, p := range pending {
		if !p.Wait() {
			b.Fatal("the broker refused a latency message")
		}
	}
	return n
}

// collect consumes n messages from queue and returns each one's latency,
// from its publish to its delivery here.
func collect(b *testing.B, url, queue string, n int, ready chan<- struct{}) []time.Duration {
	b.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if err := ch.Qos(latencyPrefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	dels, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	close(ready)
	out := make([]time.Duration, 0, n)
	timeout := time.After(latencyDuration + 2*time.Minute)
	for len(out) < n {
		select {
		case d := <-dels:
			var s stamp
			if err := json.Unmarshal(d.Body, &s); err != nil {
				b.Fatalf("%s: a message that is not a latency stamp: %v", queue, err)
			}
			out = append(out, time.Duration(time.Now().UnixNano()-s.Sent))
		case <-timeout:
			b.Fatalf("%s: %d of %d messages arrived", queue, len(out), n)
		}
	}
	return out
}

// measure feeds a chain whose first queue is reached through exchange/key
// and whose last hop ends in queue out, and returns p50 and p99.
func measure(b *testing.B, url, exchange, key, out string, dur time.Duration) (p50, p99 time.Duration) {
	n := int(dur.Seconds() * latencyRate)
	ready := make(chan struct{})
	var lat []time.Duration
	var wg sync.WaitGroup
	wg.Go(func() { lat = collect(b, url, out, n, ready) })
	<-ready
	feed(b, url, exchange, key, dur)
	wg.Wait()
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}

// rawChain runs three raw hops q0 → q1 → q2 → q3, each a consumer with the
// chain's prefetch that publishes its input on with a confirm and
// acknowledges once the confirm arrives, as rawHop does, until stop.
func rawChain(b *testing.B, url string, queues []string, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range 3 {
		conn, err := amqp.Dial(url)
		if err != nil {
			b.Fatal(err)
		}
		cch, _ := conn.Channel()
		pch, _ := conn.Channel()
		if err := cch.Qos(latencyPrefetch, 0, false); err != nil {
			b.Fatal(err)
		}
		if err := pch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		dels, err := cch.Consume(queues[i], "", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		type inflight struct {
			dc  *amqp.DeferredConfirmation
			tag uint64
		}
		acks := make(chan inflight, latencyPrefetch)
		wg.Go(func() {
			for f := range acks {
				f.dc.Wait()
				_ = cch.Ack(f.tag, false)
			}
		})
		wg.Go(func() {
			defer conn.Close()
			defer close(acks)
			for {
				select {
				case <-stop:
					return
				case d, ok := <-dels:
					if !ok {
						return
					}
					dc, err := pch.PublishWithDeferredConfirmWithContext(context.Background(), "", queues[i+1], true, false,
						amqp.Publishing{MessageId: d.MessageId, ContentType: d.ContentType, Body: d.Body, DeliveryMode: amqp.Persistent})
					if err != nil {
						b.Error(err)
						return
					}
					acks <- inflight{dc, d.DeliveryTag}
				}
			}
		})
	}
	return &wg
}

const latencyFlow = `version: acemq.flow/v1
name: bench
plugins:
  testkit: {command: TESTKIT}
pipelines:
  - name: PIPE
    steps:
      - {name: a, handler: testkit.echo, prefetch: PREFETCH, retry: {max_attempts: 1}}
      - {name: b, handler: testkit.echo, prefetch: PREFETCH, retry: {max_attempts: 1}}
      - {name: c, handler: testkit.echo, prefetch: PREFETCH, retry: {max_attempts: 1}}
      - {name: sink, handler: testkit.echo, auto_startup: false}
`

// runtimeChain runs a pipeline of three testkit echo steps through the
// plugin and a fourth, never started, whose queue the output of the third
// lands in; it returns the plan and a stop function.
func runtimeChain(b *testing.B, url, pipe, testkit string) (*plan.Plan, func()) {
	flow := strings.NewReplacer("PIPE", pipe, "TESTKIT", testkit, "PREFETCH", fmt.Sprint(latencyPrefetch)).Replace(latencyFlow)
	pl := compileFlow(b, flow)
	_, _, stop := runRuntime(b, pl, runtime.Options{AMQPURL: url})
	return pl, stop
}

// BenchmarkLatency prints latency-3hop-p50 and latency-3hop-p99: the
// medians of three rounds, each a raw chain then the runtime's, fed at 500
// msg/s for 20 s (after a warm-up pair of 3 s that is not counted), with the
// ratio ours / raw of each round and its spread. ACEMQ_BENCH_ONLY=latency
// runs it alone.
func BenchmarkLatency(b *testing.B) {
	if only := os.Getenv("ACEMQ_BENCH_ONLY"); only != "" && only != "latency" {
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
	var raw50, raw99, our50, our99, r50, r99 []float64
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for r := range latencyRounds + 1 {
		warm := r == 0
		dur := latencyDuration
		if warm {
			dur = min(dur, 3*time.Second)
		}
		// Raw: four fresh quorum queues, three hops between them.
		var qs []string
		for i := range 4 {
			q := fmt.Sprintf("lat%d.q%d", r, i)
			quorum(b, ch, q)
			qs = append(qs, q)
		}
		stop := make(chan struct{})
		wg := rawChain(b, url, qs, stop)
		rp50, rp99 := measure(b, url, "", qs[0], qs[3], dur)
		close(stop)
		wg.Wait()
		for _, q := range qs {
			drop(b, ch, q)
		}
		// Ours: the pipeline's three steps, fed as send feeds a pipeline.
		pipe := fmt.Sprintf("latpipe%d", r)
		pl, stopRuntime := runtimeChain(b, url, pipe, testkit)
		op50, op99 := measure(b, url, pipe, "a", pipe+".sink", dur)
		stopRuntime()
		for _, q := range pl.Queues {
			drop(b, ch, q.Name)
		}
		if verbose {
			fmt.Printf("bench: round %d latency p50 %.2f ms raw=%.2f p99 %.2f ms raw=%.2f warm-up=%v\n", r, ms(op50), ms(rp50), ms(op99), ms(rp99), warm)
		}
		if warm {
			continue
		}
		raw50, raw99 = append(raw50, ms(rp50)), append(raw99, ms(rp99))
		our50, our99 = append(our50, ms(op50)), append(our99, ms(op99))
		r50, r99 = append(r50, ms(op50)/ms(rp50)), append(r99, ms(op99)/ms(rp99))
	}
	fmt.Printf("bench: latency-3hop-p50 %.2f ms raw=%.2f ratio=%.2f spread=%.2f–%.2f\n", median(our50), median(raw50), median(r50), slices.Min(r50), slices.Max(r50))
	fmt.Printf("bench: latency-3hop-p99 %.2f ms raw=%.2f ratio=%.2f spread=%.2f–%.2f\n", median(our99), median(raw99), median(r99), slices.Min(r99), slices.Max(r99))
}
