package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/scheduler"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/test/testenv"
)

// The delay ladder's figures (FLOW-FORMAT §4), each on a vhost of its own
// with the real 1 s levels:
//
//   - delay-late-p50 and delay-late-p99, in milliseconds: how late 10,000
//     messages with delays spread over 1–60 s arrive at their destination
//     (arrival − the time asked for), with the latest as max=. There is no
//     raw counterpart: RabbitMQ has no delay of its own. A message that
//     arrives early, or not at all, fails the benchmark.
//   - delay-deliver, in msgs/s: how fast the `.due` consumer delivers
//     messages already due to their destination, against hop-raw run just
//     before it (as the hops: medians of five rounds after a warm-up round,
//     each on fresh queues).
const (
	delayMessages = 10000
	delayMin      = time.Second
	delayMax      = 60 * time.Second
	delayWarmUp   = 200 // messages of 1–2 s before the run, not counted
	// delayPublishers is how many goroutines call PublishAt at once: each
	// call waits for its confirm, and 10,000 one after the other would
	// take longer than the shortest delay.
	delayPublishers = 16
)

// dueStamp is the body of a delay-late message: the time it was asked to
// arrive at, in nanoseconds of this process's clock, and padding to 1 KiB
// as the hops'.
type dueStamp struct {
	Due int64  `json:"due"`
	Pad string `json:"pad"`
}

// delayRun publishes n messages through rt.PublishAt to queue, each due
// after a delay drawn from [lo, hi), delayPublishers at a time, and
// returns each one's lateness as it arrived in queue. It fails the
// benchmark if one arrives early or any is missing 30 s after the latest
// is due; a message delivered twice (at least once) is counted once and
// reported.
func delayRun(b *testing.B, url string, rt *runtime.Runtime, queue string, n int, lo, hi time.Duration) []time.Duration {
	b.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	quorum(b, ch, queue)
	defer drop(b, ch, queue)
	if err := ch.Qos(prefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	dels, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	asked := make([]time.Duration, n) // each message's delay
	var wg sync.WaitGroup
	errs := make(chan error, delayPublishers)
	for p := range delayPublishers {
		wg.Go(func() {
			for i := p; i < n; i += delayPublishers {
				d := lo + rand.N(hi-lo)
				asked[i] = d
				at := time.Now().Add(d)
				body, _ := json.Marshal(dueStamp{Due: at.UnixNano(), Pad: pad})
				m := decide.Message{RoutingKey: queue, MessageID: strconv.Itoa(i), ContentType: "application/json", Body: body}
				if err := rt.PublishAt(context.Background(), m, at); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	late := make([]time.Duration, 0, n)
	byLevels, byDelay := levelLateness{}, levelLateness{}
	seen := make([]bool, n)
	dups := 0
	timeout := time.After(hi + 30*time.Second)
	for len(late) < n {
		select {
		case d := <-dels:
			now := time.Now()
			i, err := strconv.Atoi(d.MessageId)
			var s dueStamp
			if err != nil || i < 0 || i >= n || json.Unmarshal(d.Body, &s) != nil {
				b.Fatalf("%s: a message that is not one of the benchmark's: id %q", queue, d.MessageId)
			}
			if seen[i] {
				dups++
				continue
			}
			seen[i] = true
			l := now.Sub(time.Unix(0, s.Due))
			if l < 0 {
				b.Fatalf("%s: message %s arrived %s early (due at %s, x-acemq-due-at %v)", queue, d.MessageId, -l,
					time.Unix(0, s.Due).UTC().Format(time.RFC3339Nano), d.Headers[plan.HeaderDueAt])
			}
			late = append(late, l)
			if verbose {
				byLevels.add(asked[i], l)
				byDelay.addDelay(asked[i], l)
			}
		case <-timeout:
			b.Fatalf("%s: %d of %d delayed messages arrived within %s of the last being due", queue, len(late), n, 30*time.Second)
		}
	}
	if dups > 0 {
		fmt.Printf("bench: delay-late: %d message(s) delivered twice (at least once), counted once\n", dups)
	}
	if verbose {
		byLevels.print(queue, "levels=%d")
		byDelay.print(queue, "delay=%d0s+")
	}
	return late
}

// levelLateness groups delayed messages by how many levels of the ladder
// their delay passes through (the set bits of its whole seconds, rounded
// up), with how late each arrived beyond that rounding: what the broker's
// hops from level to level and the `.due` consumer added.
type levelLateness map[int][]time.Duration

func (ll levelLateness) add(asked, late time.Duration) {
	secs := (asked + time.Second - 1) / time.Second
	rounding := secs*time.Second - asked
	k := bits.OnesCount64(uint64(secs))
	ll[k] = append(ll[k], late-rounding)
}

// addDelay groups by the delay's ten seconds instead (0: under 10 s).
func (ll levelLateness) addDelay(asked, late time.Duration) {
	secs := (asked + time.Second - 1) / time.Second
	k := int(asked / (10 * time.Second))
	ll[k] = append(ll[k], late-(secs*time.Second-asked))
}

func (ll levelLateness) print(queue, group string) {
	for k := range 8 {
		v := ll[k]
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		fmt.Printf("bench: %s "+group+" n=%d beyond-rounding p50 %.0f ms p99 %.0f ms max %.0f ms\n", queue, k, len(v),
			float64(v[len(v)/2])/1e6, float64(v[len(v)*99/100])/1e6, float64(v[len(v)-1])/1e6)
	}
	clear(ll)
}

// BenchmarkDelayLate prints delay-late-p50 and delay-late-p99: 10,000
// messages published with Runtime.PublishAt (16 callers at once) with
// delays spread evenly over 1–60 s, through the runtime's delay ladder on
// the real 1 s levels to a quorum queue consumed here, after a warm-up of
// 200 messages of 1–2 s that is not counted. One run: it lasts the longest
// delay, a minute. ACEMQ_BENCH_ONLY=delay-late runs it alone.
func BenchmarkDelayLate(b *testing.B) {
	if only := os.Getenv("ACEMQ_BENCH_ONLY"); only != "" && only != "delay-late" {
		b.Skip("ACEMQ_BENCH_ONLY=" + only)
	}
	url := testenv.VHost(b)
	rt, _, stop := runRuntime(b, &plan.Plan{}, runtime.Options{AMQPURL: url, Delays: true})
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	warm := delayRun(b, url, rt, "delay-late-warm", delayWarmUp, time.Second, 2*time.Second)
	if verbose {
		slices.Sort(warm)
		fmt.Printf("bench: round 0 delay-late p50 %.0f ms p99 %.0f ms max %.0f ms warm-up=true\n",
			ms(warm[len(warm)/2]), ms(warm[len(warm)*99/100]), ms(warm[len(warm)-1]))
	}
	late := delayRun(b, url, rt, "delay-late", delayMessages, delayMin, delayMax)
	stop()
	slices.Sort(late)
	fmt.Printf("bench: delay-late-p50 %.0f ms\n", ms(late[len(late)/2]))
	fmt.Printf("bench: delay-late-p99 %.0f ms max=%.0f n=%d\n", ms(late[len(late)*99/100]), ms(late[len(late)-1]), len(late))
}

// ladder declares the delay ladder of the real 1 s levels on conn's vhost,
// as the runtime declares it, and returns `.due`'s queue as declared, for
// declaring it fresh for each round.
func ladder(b *testing.B, conn *broker.Conn) broker.Queue {
	b.Helper()
	topo := broker.NewTopology(conn, nil)
	defer topo.Close()
	xs, qs, bs := plan.Ladder(plan.LadderUnit)
	var bx []broker.Exchange
	var bq []broker.Queue
	var bb []broker.Binding
	var due broker.Queue
	for _, x := range xs {
		bx = append(bx, broker.Exchange{Name: x.Name, Kind: x.Type, Durable: true})
	}
	for _, q := range qs {
		bq = append(bq, broker.Queue{Name: q.Name, Durable: true, Args: q.Arguments})
		if q.Name == plan.DueQueue {
			due = bq[len(bq)-1]
		}
	}
	for _, bd := range bs {
		bb = append(bb, broker.Binding{Exchange: bd.Exchange, Queue: bd.Queue, ToExchange: bd.ToExchange, RoutingKey: bd.RoutingKey})
	}
	if err := topo.Declare(context.Background(), bx, bq, bb); err != nil {
		b.Fatal(err)
	}
	return due
}

// fillDue puts n messages already due for queue (through the default
// exchange) into `.due`, as the ladder's last level leaves them: the
// ladder's headers, 1 KiB bodies, pipelined confirms.
func fillDue(b *testing.B, ch *amqp.Channel, queue string, n int) {
	b.Helper()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	var pending []*amqp.DeferredConfirmation
	for i := range n {
		now := time.Now()
		m := decide.Message{MessageID: fmt.Sprint(i), Body: body, DeliveryMode: decide.Persistent}
		ex, key, err := decide.Delay(&m, "", queue, now, now)
		if err != nil {
			b.Fatal(err)
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), ex, key, true, false, wire.Publishing(m).Publishing)
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

// dueDeliver fills a fresh `.due` with n messages already due for a fresh
// queue, then starts a Due consumer (as the runtime starts it: a consuming
// and a publishing connection, prefetch 256) and measures how fast it
// moves them all to that queue.
func dueDeliver(b *testing.B, ch *amqp.Channel, consume, publish *broker.Conn, due broker.Queue, dst string, n int) float64 {
	if _, err := ch.QueueDeclare(due.Name, true, false, false, false, amqp.Table(due.Args)); err != nil {
		b.Fatal(err)
	}
	quorum(b, ch, dst)
	fillDue(b, ch, dst, n)
	waitDepth(b, ch, plan.DueQueue, n, time.Minute)
	d, err := scheduler.NewDue(consume, publish, scheduler.DueOptions{Prefetch: prefetch})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- d.Run(ctx) }()
	end := waitDepth(b, ch, dst, n, 5*time.Minute)
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	drop(b, ch, plan.DueQueue)
	drop(b, ch, dst)
	return float64(n) / end.Sub(start).Seconds()
}

// BenchmarkDelayDeliver prints delay-deliver: the `.due` consumer taking
// 20,000 (ACEMQ_BENCH_MESSAGES) 1 KiB messages already due from a fresh
// `.due` and publishing each to its destination queue (the default
// exchange, as the raw hop) with confirms and mandatory, acknowledging
// after, against hop-raw on fresh queues just before it: medians of five
// rounds after a warm-up round. ACEMQ_BENCH_ONLY=delay-deliver runs it
// alone.
func BenchmarkDelayDeliver(b *testing.B) {
	if only := os.Getenv("ACEMQ_BENCH_ONLY"); only != "" && only != "delay-deliver" {
		b.Skip("ACEMQ_BENCH_ONLY=" + only)
	}
	url := testenv.VHost(b)
	open := func(name string) *broker.Conn {
		c, err := broker.Open(context.Background(), url, broker.ConnOptions{Name: "bench delay-deliver " + name})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	consume, publish := open("consume"), open("publish")
	due := ladder(b, publish)
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	drop(b, ch, plan.DueQueue) // declared fresh for each round
	var raw []float64
	f := &figure{}
	for r := range rounds + 1 {
		warm := r == 0
		src, dst := fmt.Sprintf("dueraw%d.src", r), fmt.Sprintf("dueraw%d.dst", r)
		quorum(b, ch, src)
		quorum(b, ch, dst)
		fill(b, ch, "", src, messages)
		rv := rawHop(b, url, src, dst, messages, false)
		drop(b, ch, src)
		drop(b, ch, dst)
		v := dueDeliver(b, ch, consume, publish, due, fmt.Sprintf("due%d.dst", r), messages)
		if verbose {
			fmt.Printf("bench: round %d delay-deliver %.0f msgs/s raw=%.0f ratio=%.2f warm-up=%v\n", r, v, rv, v/rv, warm)
		}
		if warm {
			continue
		}
		raw = append(raw, rv)
		f.values = append(f.values, v)
		f.ratios = append(f.ratios, v/rv)
	}
	fmt.Printf("bench: delay-deliver %.0f msgs/s raw=%.0f ratio=%.2f spread=%.2f–%.2f\n", median(f.values), median(raw), median(f.ratios), slices.Min(f.ratios), slices.Max(f.ratios))
}
