//go:build chaos

package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// transport is S25's set-up: acemq's transport (runtime/broker's Conn,
// Publisher and Consumer) on one node of the private cluster, in a vhost
// of the scenario's own, its queues quorum queues replicated over the
// three nodes. The node is the one restarted: nothing else uses it.
type transport struct {
	t    *testing.T
	node harness.Node
	url  string
	topo *broker.Topology
	n    int // queues declared
}

func newTransport(t *testing.T) *transport {
	t.Helper()
	s := harness.ClusterEnv(t)
	tr := &transport{t: t, node: harness.ClusterNodes[2], url: s.URLs[2]}
	tr.topo = broker.NewTopology(tr.conn("topology"), nil)
	t.Cleanup(func() { tr.topo.Close() })
	return tr
}

// conn opens a Conn on the node, closed when the test ends. Its backoff
// stays under a second, so that it is back soon after a restart.
func (tr *transport) conn(role string) *broker.Conn {
	tr.t.Helper()
	ctx, cancel := context.WithTimeout(tr.t.Context(), time.Minute)
	defer cancel()
	c, err := broker.Open(ctx, tr.url, broker.ConnOptions{Name: "acemq-flow s25 " + role, BackoffMin: 50 * time.Millisecond, BackoffMax: time.Second, Management: broker.ManagementOff})
	if err != nil {
		tr.t.Fatalf("Open: %v", err)
	}
	tr.t.Cleanup(func() { c.Close() })
	return c
}

func (tr *transport) queue() string {
	tr.t.Helper()
	tr.n++
	q := fmt.Sprintf("s25-%d", tr.n)
	if err := tr.topo.DeclareQueue(tr.t.Context(), broker.Queue{Name: q, Durable: true, Args: map[string]any{"x-queue-type": "quorum"}}); err != nil {
		tr.t.Fatalf("DeclareQueue(%s): %v", q, err)
	}
	return q
}

func (tr *transport) publisher(c *broker.Conn) *broker.Publisher {
	tr.t.Helper()
	p, err := broker.OpenPublisher(tr.t.Context(), c, broker.PublisherOptions{})
	if err != nil {
		tr.t.Fatalf("OpenPublisher: %v", err)
	}
	tr.t.Cleanup(func() { p.Close() })
	return p
}

// publish publishes one message until the broker confirms it, retrying
// every 500 ms (Watermill's publishWithRetry, its reconnect test's period)
// while the outcome is unknown, for up to two minutes.
func publish(p *broker.Publisher, q, id string, headers amqp.Table, body string) error {
	end := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := p.Publish(ctx, broker.Message{RoutingKey: q, Publishing: amqp.Publishing{MessageId: id, Headers: headers, Body: []byte(body)}})
		cancel()
		var ind *broker.IndeterminateError
		switch {
		case err == nil:
			return nil
		case time.Now().After(end) || (!errors.As(err, &ind) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, broker.ErrClosed)):
			return fmt.Errorf("publish %s: %w", id, err)
		}
		time.Sleep(500 * time.Millisecond) // the retry period
	}
}

// received is what consumers received: each id with its body and header,
// and how many deliveries repeated an id already acknowledged.
type received struct {
	mu      sync.Mutex
	body    map[string]string
	header  map[string]string
	repeats int
	changed chan struct{}
}

func newReceived() *received {
	return &received{body: map[string]string{}, header: map[string]string{}, changed: make(chan struct{}, 1)}
}

// handler acknowledges each delivery and records it; nack, when set,
// decides first whether to nack (requeue) it instead.
func (r *received) handler(nack func(*broker.Delivery) bool) broker.Handler {
	return func(_ context.Context, d *broker.Delivery) {
		if nack != nil && nack(d) {
			_ = d.Nack(true)
			return
		}
		if d.Ack() != nil {
			return // stale: the broker redelivers it
		}
		r.mu.Lock()
		if _, ok := r.body[d.MessageId]; ok {
			r.repeats++
		} else {
			r.body[d.MessageId], r.header[d.MessageId] = string(d.Body), fmt.Sprint(d.Headers["x-s25"])
		}
		r.mu.Unlock()
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
}

func (r *received) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.body)
}

// wait waits until n ids were received or d passes.
func (r *received) wait(n int, d time.Duration) bool {
	end := time.NewTimer(d)
	defer end.Stop()
	for r.len() < n {
		select {
		case <-r.changed:
		case <-end.C:
			return r.len() >= n
		}
	}
	return true
}

// missing returns the ids of ids not received.
func (r *received) missing(ids []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, id := range ids {
		if _, ok := r.body[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// run runs c with h until the returned stop is called (or the test ends)
// and returns Run's result from stop.
func run(t *testing.T, c *broker.Consumer, h broker.Handler) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- c.Run(ctx, h) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-res
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// publishAll publishes every id from workers goroutines on p.
func publishAll(t *testing.T, p *broker.Publisher, q string, all []string, workers int) {
	t.Helper()
	work := make(chan string)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for id := range work {
				if err := publish(p, q, id, amqp.Table{"x-s25": "h-" + id}, "body-"+id); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for _, id := range all {
		work <- id
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestChaosS25TransportConformance is the subset of Watermill's universal
// Pub/Sub suite (research/reliability.md §3) that applies to acemq's
// transport, at its normal and -short sizes, on a node of the private
// cluster, with the broker restarts of its reconnect test made by
// rabbitmqctl stop_app and start_app.
func TestChaosS25TransportConformance(t *testing.T) {
	tr := newTransport(t)
	restoreCluster(t)
	pubConn, subConn := tr.conn("publish"), tr.conn("consume")
	p := tr.publisher(pubConn)
	var passed []string
	start := time.Now()
	restarts := 0
	total, lost := 0, 0 // messages published and confirmed; not received
	count := func(all []string, got *received) {
		total += len(all)
		lost += len(got.missing(all))
	}

	t.Run("PublishSubscribe", func(t *testing.T) {
		// Published before anyone subscribes: all received, payload and
		// headers intact; the consumer's Run ends cleanly when closed.
		q := tr.queue()
		all := ids("ps", 100)
		publishAll(t, p, q, all, 1)
		got := newReceived()
		stop := run(t, broker.NewConsumer(subConn, broker.ConsumerOptions{Queue: q, Prefetch: 50}), got.handler(nil))
		ok := got.wait(len(all), 45*time.Second)
		count(all, got)
		if !ok {
			t.Fatalf("%d of %d received", got.len(), len(all))
		}
		got.mu.Lock()
		defer got.mu.Unlock()
		for _, id := range all {
			if got.body[id] != "body-"+id || got.header[id] != "h-"+id {
				t.Errorf("%s arrived with body %q, header %q; want body-%s, h-%s", id, got.body[id], got.header[id], id, id)
			}
		}
		if err := stop(); err != nil {
			t.Errorf("Run after close = %v, want nil", err)
		}
		passed = append(passed, "publish-subscribe 100")
	})

	t.Run("ConcurrentSubscribe", func(t *testing.T) {
		// Many consumers of one queue together receive every message.
		q := tr.queue()
		n, subs := size(100, 5000), size(10, 50)
		got := newReceived()
		for range subs {
			run(t, broker.NewConsumer(subConn, broker.ConsumerOptions{Queue: q, Prefetch: 10}), got.handler(nil))
		}
		all := ids("cs", n)
		publishAll(t, p, q, all, 10)
		ok := got.wait(n, 45*time.Second)
		count(all, got)
		if !ok {
			t.Fatalf("%d subscribers received %d of %d; missing e.g. %v", subs, got.len(), n, first(got.missing(all), 5))
		}
		passed = append(passed, fmt.Sprintf("concurrent subscribe %d × %d", n, subs))
	})

	t.Run("ResendOnError", func(t *testing.T) {
		// The first two deliveries are nacked: they come again, and
		// nothing is lost.
		q := tr.queue()
		all := ids("re", 100)
		var mu sync.Mutex
		nacked := 0
		got := newReceived()
		run(t, broker.NewConsumer(subConn, broker.ConsumerOptions{Queue: q, Prefetch: 10}), got.handler(func(d *broker.Delivery) bool {
			mu.Lock()
			defer mu.Unlock()
			if nacked < 2 {
				nacked++
				return true
			}
			return false
		}))
		publishAll(t, p, q, all, 1)
		ok := got.wait(len(all), 45*time.Second)
		count(all, got)
		if !ok {
			t.Fatalf("%d of %d received after %d nacks; missing %v", got.len(), len(all), nacked, first(got.missing(all), 5))
		}
		passed = append(passed, "resend on nack 100 (2 nacked)")
	})

	t.Run("NoAck", func(t *testing.T) {
		// With a prefetch of 1, the next message waits until the first
		// is acknowledged; once it is, the next arrives and the first
		// does not come again.
		q := tr.queue()
		publishAll(t, p, q, []string{"na-0", "na-1"}, 1)
		dels := make(chan *broker.Delivery, 4)
		run(t, broker.NewConsumer(subConn, broker.ConsumerOptions{Queue: q, Prefetch: 1}), func(_ context.Context, d *broker.Delivery) { dels <- d })
		var d0 *broker.Delivery
		select {
		case d0 = <-dels:
		case <-time.After(15 * time.Second):
			t.Fatal("no delivery within 15s")
		}
		select {
		case d := <-dels:
			t.Fatalf("%s delivered while %s awaits its ack, prefetch 1", d.MessageId, d0.MessageId)
		case <-time.After(100 * time.Millisecond): // Watermill's bound: an absence cannot be awaited
		}
		if err := d0.Ack(); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-dels:
			if d.MessageId == d0.MessageId {
				t.Fatalf("%s delivered again after its ack", d.MessageId)
			}
			_ = d.Ack()
		case <-time.After(5 * time.Second):
			t.Fatal("the second message did not arrive within 5s of the first's ack")
		}
		passed = append(passed, "no-ack blocks (prefetch 1)")
	})

	t.Run("ContinueAfterSubscribeClose", func(t *testing.T) {
		// Consumers closed mid-stream, again and again: a new one carries
		// on and nothing is lost (deliveries in flight are handed back).
		q := tr.queue()
		n, batches := size(50, 5000), size(2, 5)
		all := ids("cc", n)
		publishAll(t, p, q, all, 10)
		got := newReceived()
		closes := 0
		for closes < batches*4 && got.len() < n {
			c := broker.NewConsumer(subConn, broker.ConsumerOptions{Queue: q, Prefetch: 5})
			stop := run(t, c, got.handler(nil))
			got.wait(min(n, got.len()+n/(batches*4)+1), 15*time.Second)
			if err := stop(); err != nil {
				var de *broker.DrainError
				if !errors.As(err, &de) {
					t.Fatalf("Run after close = %v", err)
				}
			}
			closes++
		}
		stop := run(t, broker.NewConsumer(subConn, broker.ConsumerOptions{Queue: q, Prefetch: 20}), got.handler(nil))
		ok := got.wait(n, 45*time.Second)
		count(all, got)
		if !ok {
			t.Fatalf("after %d closed consumers, %d of %d received; missing %v", closes, got.len(), n, first(got.missing(all), 5))
		}
		stop()
		passed = append(passed, fmt.Sprintf("continue after close %d, %d consumers closed", n, closes))
	})

	t.Run("PublisherClose", func(t *testing.T) {
		// 20 goroutines publish on one publisher, which is then closed:
		// every message it confirmed is there.
		q := tr.queue()
		n := size(100, 10000)
		pp := tr.publisher(pubConn)
		all := ids("pc", n)
		publishAll(t, pp, q, all, 20)
		if err := pp.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
		got := newReceived()
		run(t, broker.NewConsumer(subConn, broker.ConsumerOptions{Queue: q, Prefetch: 100}), got.handler(nil))
		ok := got.wait(n, 60*time.Second)
		count(all, got)
		if !ok {
			t.Fatalf("%d of %d received; missing %v", got.len(), n, first(got.missing(all), 5))
		}
		passed = append(passed, fmt.Sprintf("publisher close %d from 20", n))
	})

	t.Run("Reconnect", func(t *testing.T) {
		// The broker restarted twice under load, at a third and at half of
		// the messages: publishers retry every 500 ms, the consumer comes
		// back by itself, and nothing is lost.
		q := tr.queue()
		n, workers := size(1000, 10000), size(20, 100)
		all := ids("rc", n)
		got := newReceived()
		run(t, broker.NewConsumer(subConn, broker.ConsumerOptions{Queue: q, Prefetch: 100, Concurrency: 4}), got.handler(nil))
		var sent sync.WaitGroup
		var mu sync.Mutex
		confirmed := 0
		restartAt := map[int]bool{n / 3: true, n / 2: true}
		restart := make(chan struct{}, 2)
		work := make(chan string)
		failed := make(chan error, workers)
		for range workers {
			sent.Go(func() {
				for id := range work {
					if err := publish(p, q, id, nil, "body-"+id); err != nil {
						failed <- err
						return
					}
					mu.Lock()
					confirmed++
					if restartAt[confirmed] {
						restart <- struct{}{}
					}
					mu.Unlock()
				}
			})
		}
		restarted := make(chan error, 1)
		go func() {
			for range 2 {
				<-restart
				for _, args := range [][]string{{"stop_app"}, {"start_app"}, {"await_startup", "--timeout", "120"}} {
					if _, err := harness.RabbitmqctlErr(append([]string{"-n", tr.node.Name}, args...)...); err != nil {
						restarted <- err
						return
					}
				}
				restarts++
			}
			restarted <- nil
		}()
		for _, id := range all {
			work <- id
		}
		close(work)
		sent.Wait()
		if err := <-restarted; err != nil {
			t.Fatalf("restarting %s: %v", tr.node.Name, err)
		}
		close(failed)
		for err := range failed {
			t.Fatal(err)
		}
		ok := got.wait(n, 60*time.Second)
		count(all, got)
		if !ok {
			t.Fatalf("after %d restarts, %d of %d received; missing %v", restarts, got.len(), n, first(got.missing(all), 5))
		}
		passed = append(passed, fmt.Sprintf("reconnect %d from %d publishers, %d restarts", n, workers, restarts))
	})

	harness.Record(t, harness.Row{Scenario: "S25 transport conformance (Watermill subset)", Verdict: harness.Verdict{OK: total, Completed: total - lost, Lost: make([]string, lost)},
		Faults:   fmt.Sprintf("%d× stop_app/start_app of %s", restarts, tr.node.Name),
		Recovery: fmt.Sprintf("%.0fs for the suite", time.Since(start).Seconds()),
		Notes:    fmt.Sprintf("passed: %v", passed)})
}

// restoreCluster starts, when the test ends, any node a failed scenario
// left stopped or killed, so that the next finds the cluster whole.
func restoreCluster(t *testing.T) {
	t.Helper()
	repo := repoRoot(t)
	t.Cleanup(func() {
		for _, n := range harness.ClusterNodes {
			if !n.Up() {
				harness.Restart(t, repo)
				return
			}
		}
	})
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}
