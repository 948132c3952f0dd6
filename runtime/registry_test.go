package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

const registryFlow = `version: acemq.flow/v1
name: reg
plugins:
  k: {command: ./not-started}
pipelines:
  - name: p
    steps:
      - {name: a, handler: k.echo, concurrency: 2}
consumers:
  - {id: late, queue: late.q, handler: k.echo, auto_startup: false, declare: {type: classic}}
`

// echo returns its payload.
var echo = runtimetest.Echo

func queueConsumers(t *testing.T, ch *amqp.Channel, queue string) (int, bool) {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, false
	}
	return q.Consumers, true
}

func TestRegistryStartsStopsScalesAndPauses(t *testing.T) {
	url := testenv.VHost(t)
	rt, _ := runtimetest.Start(t, url, registryFlow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{"k.echo": echo}})
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	channel := func() *amqp.Channel {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ch.Close() })
		return ch
	}
	ctx := t.Context()
	consumersOn := func(queue string, want int) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, func() error {
			if n, ok := queueConsumers(t, channel(), queue); !ok || n != want {
				return testenv.Errorf("queue %s has %d consumers (exists %v), want %d", queue, n, ok, want)
			}
			return nil
		})
	}
	// A group is one broker consumer whatever its size (its size is how
	// many handlers run at once: TestGroupSizeIsHandlersAtOnce).
	consumersOn("p.a", 1)
	if _, ok := queueConsumers(t, channel(), "late.q"); ok {
		t.Error("an auto_startup: false consumer's queue was declared before it was started")
	}

	if err := rt.Scale("p.a", 3); err != nil {
		t.Fatal(err)
	}
	if err := rt.Scale("p.a", 1); err != nil {
		t.Fatal(err)
	}
	consumersOn("p.a", 1)
	if err := rt.Scale("p.a", 0); !errors.Is(err, runtime.ErrGroupSize) || err.Error() != `consumer "p.a": a group needs at least one consumer` {
		t.Errorf("Scale(0) = %v, want %q", err, `consumer "p.a": a group needs at least one consumer`)
	}
	// A size near the largest int wrapped the sum with the other groups
	// below the limit, and the scale then subscribed without end.
	if err := rt.Scale("p.a", math.MaxInt-1); !errors.Is(err, runtime.ErrTooManyConsumers) {
		t.Errorf("Scale(MaxInt-1) = %v, want ErrTooManyConsumers", err)
	}
	// More consumers than one connection has channels for is refused,
	// and so is a prefetch basic.qos cannot carry; neither is kept.
	before, err := rt.Consumer(ctx, "p.a")
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Scale("p.a", runtime.MaxConsumers); !errors.Is(err, runtime.ErrTooManyConsumers) {
		t.Errorf("Scale(MaxConsumers) beside another group = %v, want ErrTooManyConsumers", err)
	}
	if err := rt.Prefetch("p.a", 70000); err == nil || !strings.Contains(err.Error(), "1 to 65535") {
		t.Errorf("Prefetch(70000) = %v, want a refusal naming the range 1 to 65535", err)
	}
	if st, err := rt.Consumer(ctx, "p.a"); err != nil || st.Size != 1 || st.Prefetch != before.Prefetch {
		t.Errorf("after the refusals Consumer(p.a) = %+v, %v; want size 1 and the prefetch it had", st, err)
	}
	if err := rt.Prefetch("p.a", 7); err != nil {
		t.Fatal(err)
	}
	st, err := rt.Consumer(ctx, "p.a")
	if err != nil || st.Prefetch != 7 || st.Size != 1 || st.State != runtime.StateRunning {
		t.Errorf("Consumer(p.a) = %+v, %v; want running, size 1, prefetch 7", st, err)
	}

	if err := rt.Stop("p.a"); err != nil {
		t.Fatal(err)
	}
	consumersOn("p.a", 0)
	if err := rt.Start(ctx, "p.a"); err != nil {
		t.Fatal(err)
	}
	consumersOn("p.a", 1)

	if err := rt.Start(ctx, "late"); err != nil {
		t.Fatalf("Start(late): %v", err)
	}
	consumersOn("late.q", 1)

	if err := rt.Pause(); err != nil {
		t.Fatal(err)
	}
	consumersOn("p.a", 0)
	consumersOn("late.q", 0)
	if err := rt.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	consumersOn("p.a", 1)
	consumersOn("late.q", 1)

	if err := rt.Start(ctx, "nope"); !errors.Is(err, runtime.ErrUnknownConsumer) {
		t.Errorf("Start(nope) = %v, want ErrUnknownConsumer", err)
	}
}

func TestStartIsRefusedWhileTheQueueIsMissing(t *testing.T) {
	url := testenv.VHost(t)
	rt, _ := runtimetest.Start(t, url, `version: acemq.flow/v1
name: reg
plugins:
  k: {command: ./not-started}
consumers:
  - {id: orders, queue: orders.nwe, handler: k.echo, auto_startup: false}
`, runtime.Options{Handlers: map[string]runtime.HandlerFunc{"k.echo": echo}})
	err := rt.Start(t.Context(), "orders")
	if err == nil || !strings.Contains(err.Error(), `queue "orders.nwe", which does not exist`) {
		t.Fatalf("Start(orders) = %v, want a refusal naming the missing queue", err)
	}
	st, _ := rt.Consumer(t.Context(), "orders")
	if st.State != runtime.StateStopped {
		t.Errorf("state %s after a refused start, want stopped", st.State)
	}
}

// TestFlowsAskingForTooManyConsumersAreRefused: consumer groups adding up
// to more consumers than one consuming connection has channels for are
// refused before anything starts, naming the largest.
func TestFlowsAskingForTooManyConsumersAreRefused(t *testing.T) {
	pl := compileText(t, `version: acemq.flow/v1
name: big
plugins:
  k: {command: ./not-started}
pipelines:
  - name: p
    steps:
      - {name: a, handler: k.echo, concurrency: 1500}
      - {name: b, handler: k.echo, concurrency: 600}
`)
	_, err := runtime.New(pl, runtime.Options{AMQPURL: "amqp://guest:guest@127.0.0.1:5672/"})
	if !errors.Is(err, runtime.ErrTooManyConsumers) || !strings.Contains(err.Error(), `"p.a" with 1500`) || !strings.Contains(err.Error(), "f.yaml:") {
		t.Fatalf("New = %v, want ErrTooManyConsumers naming f.yaml and consumer p.a with 1500", err)
	}
}

// The registry refuses what it cannot do: calls before the consumers are
// started (the groups are being built then), a start or scale once the
// runtime drains or has returned (nothing would stop what it started), and
// a start of a consumer whose queue went away while it was stopped.
func TestRegistryRefusesOutOfTurn(t *testing.T) {
	url := testenv.VHost(t)
	pl := compileText(t, `version: acemq.flow/v1
name: reg
plugins:
  k: {command: ./not-started}
consumers:
  - {id: orders, queue: orders.q, handler: k.echo, declare: {type: classic}}
  - {id: audit, queue: audit.q, handler: k.echo, auto_startup: false}
`)
	rt, err := runtime.New(pl, runtime.Options{AMQPURL: url, Handlers: map[string]runtime.HandlerFunc{"k.echo": echo}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Consumer(t.Context(), "orders"); !errors.Is(err, runtime.ErrNotStarted) {
		t.Errorf("Consumer before Run = %v, want ErrNotStarted", err)
	}
	if err := rt.Pause(); !errors.Is(err, runtime.ErrNotStarted) {
		t.Errorf("Pause before Run = %v, want ErrNotStarted", err)
	}
	ch := channelOn(t, url)()
	if _, err := ch.QueueDeclare("audit.q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	select {
	case <-rt.Started():
	case err := <-done:
		t.Fatal(err)
	}
	// Started once, stopped, its queue deleted: the next start checks again.
	if err := rt.Start(ctx, "audit"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop("audit"); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete("audit.q", false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, "audit"); err == nil || !strings.Contains(err.Error(), `"audit.q", which does not exist`) {
		t.Errorf("Start after its queue was deleted = %v, want a refusal naming audit.q", err)
	}
	if st, _ := rt.Consumer(ctx, "audit"); st.State != runtime.StateStopped {
		t.Errorf("audit is %s after the refused start, want stopped", st.State)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background(), "audit"); !errors.Is(err, runtime.ErrShuttingDown) {
		t.Errorf("Start after Run returned = %v, want ErrShuttingDown", err)
	}
	if err := rt.Scale("orders", 2); !errors.Is(err, runtime.ErrShuttingDown) {
		t.Errorf("Scale after Run returned = %v, want ErrShuttingDown", err)
	}
	// A prefetch change restarts a running group's broker consumer.
	if err := rt.Prefetch("orders", 3); !errors.Is(err, runtime.ErrShuttingDown) {
		t.Errorf("Prefetch after Run returned = %v, want ErrShuttingDown", err)
	}
	if st, _ := rt.Consumer(context.Background(), "audit"); st.State != runtime.StateStopped {
		t.Errorf("audit is %s after Run returned, want stopped", st.State)
	}
}

const handlersFlow = `version: acemq.flow/v1
name: hold
plugins:
  k: {command: ./not-started}
pipelines:
  - name: h
    steps:
      - {name: a, handler: k.hold, concurrency: 2, prefetch: 3}
`

// brokerPrefetch waits until queue has one broker consumer, of prefetch
// want (as rabbitmqctl lists it).
func brokerPrefetch(t *testing.T, url, queue string, want int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		var got []string
		for _, c := range testenv.BrokerConsumers(t, url, queue) {
			got = append(got, c.Prefetch)
		}
		if len(got) != 1 || got[0] != strconv.Itoa(want) {
			return testenv.Errorf("the broker lists prefetch counts %v for %s's consumers, want one of %d", got, queue, want)
		}
		return nil
	})
}

// holdHandler is a handler that holds each message until released, and
// records how many run at once against the bound the test sets.
type holdHandler struct {
	running atomic.Int64
	bound   atomic.Int64 // how many may run at once; a start beyond it is a violation
	over    atomic.Int64 // the largest number seen running beyond bound at a start
	release chan struct{}
}

func newHoldHandler(bound int64) *holdHandler {
	h := &holdHandler{release: make(chan struct{}, 1000)}
	h.bound.Store(bound)
	return h
}

func (h *holdHandler) handle(ctx context.Context, req runtime.Request) (decide.Result, error) {
	if n, b := h.running.Add(1), h.bound.Load(); n > b {
		for {
			o := h.over.Load()
			if n-b <= o || h.over.CompareAndSwap(o, n-b) {
				break
			}
		}
	}
	defer h.running.Add(-1)
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return decide.Result{Payload: req.Payload}, nil
}

// waitRunning waits until exactly n handlers run.
func (h *holdHandler) waitRunning(t *testing.T, n int64) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := h.running.Load(); got != n {
			return testenv.Errorf("%d handlers run, want %d", got, n)
		}
		return nil
	})
}

func publishN(t *testing.T, url, exchange, key string, n int) {
	t.Helper()
	ch := testenv.ConfirmedChannel(t, url)
	var pending []*amqp.DeferredConfirmation
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirm(exchange, key, true, false, amqp.Publishing{ContentType: "application/json", MessageId: strconv.Itoa(i), Body: []byte(strconv.Itoa(i))})
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		if !dc.Wait() {
			t.Fatal("a publish was not confirmed")
		}
	}
}

// A group's size is how many of its handlers run at once, and its prefetch
// is per handler: one broker consumer takes size × prefetch messages.
// Scaling restarts that consumer with the new size: it returns once what
// was in flight has finished, and from then on the new size holds.
func TestGroupSizeIsHandlersAtOnce(t *testing.T) {
	url := testenv.VHost(t)
	h := newHoldHandler(2)
	rt, _ := runtimetest.Start(t, url, handlersFlow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{"k.hold": h.handle}})
	publishN(t, url, "h", "a", 60)
	h.waitRunning(t, 2)
	brokerPrefetch(t, url, "h.a", 2*3)

	// releasing runs change while letting the held handlers finish one at
	// a time (a restart waits for what is in flight), and returns once the
	// change has.
	releasing := func(what string, change func() error) {
		t.Helper()
		changed := make(chan error, 1)
		go func() { changed <- change() }()
		for {
			select {
			case err := <-changed:
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				return
			case <-time.After(50 * time.Millisecond):
				if len(h.release) == 0 {
					h.release <- struct{}{}
				}
			}
		}
	}
	for _, n := range []int{4, 1, 3} {
		releasing(fmt.Sprintf("Scale(%d)", n), func() error { return rt.Scale("h.a", n) })
		// What ran before the scale has finished: the new size holds.
		h.bound.Store(int64(n))
		if r := h.running.Load(); r > int64(n) {
			t.Fatalf("after Scale(%d) returned, %d handlers run", n, r)
		}
		h.waitRunning(t, int64(n))
		brokerPrefetch(t, url, "h.a", n*3)
	}
	releasing("Prefetch(5)", func() error { return rt.Prefetch("h.a", 5) })
	brokerPrefetch(t, url, "h.a", 3*5)
	if st, err := rt.Consumer(t.Context(), "h.a"); err != nil || st.Size != 3 || st.Prefetch != 5 {
		t.Errorf("Consumer(h.a) = %+v, %v; want size 3, prefetch 5 (per handler)", st, err)
	}
	for range 200 {
		h.release <- struct{}{}
	}
	h.waitRunning(t, 0)
	if o := h.over.Load(); o > 0 {
		t.Errorf("a handler started with %d more running than the group's size allowed", o)
	}
}

const orderFlow = `version: acemq.flow/v1
name: order
plugins:
  k: {command: ./not-started}
pipelines:
  - name: o
    steps:
      - {name: a, handler: k.seq, prefetch: 20}
`

// Changes of a group's prefetch under load (each restarts its broker
// consumer: what it prefetched goes back to the queue) lose no message and
// handle none twice.
func TestPrefetchChangesUnderLoadLoseNothing(t *testing.T) {
	url := testenv.VHost(t)
	const total = 600
	var (
		mu   sync.Mutex
		seen []int
	)
	done := make(chan struct{})
	seq := func(_ context.Context, req runtime.Request) (decide.Result, error) {
		n, _ := strconv.Atoi(string(req.Payload))
		mu.Lock()
		seen = append(seen, n)
		if len(seen) == total {
			close(done)
		}
		mu.Unlock()
		time.Sleep(time.Millisecond)
		return decide.Result{Payload: req.Payload}, nil
	}
	rt, _ := runtimetest.Start(t, url, orderFlow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{"k.seq": seq}})
	publishN(t, url, "o", "a", total)
	// Six changes while the queue is being worked through (each returns
	// what was prefetched, which a quorum queue counts towards its
	// delivery limit); the broker consumer has the last one.
	for i := range 6 {
		if err := rt.Prefetch("o.a", 5+i); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == total {
			t.Fatalf("the queue was worked through before change %d: the changes did not happen under load", i+1)
		}
	}
	brokerPrefetch(t, url, "o.a", 10)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		st, _ := rt.Consumer(t.Context(), "o.a")
		t.Logf("queues: %s", testenv.Rabbitmqctl(t, "list_queues", "-p", testenv.VHostOf(url), "-q", "--no-table-headers", "name", "messages_ready", "messages_unacknowledged", "consumers"))
		t.Fatalf("%d of %d messages handled within 60s; consumer %+v", n, total, st)
	}
	mu.Lock()
	defer mu.Unlock()
	handled := map[int]int{}
	for _, n := range seen {
		handled[n]++
	}
	for i := range total {
		if handled[i] != 1 {
			t.Errorf("message %d was handled %d times, want once", i, handled[i])
		}
	}
}

// A group's status is answered while the group drains (a stop, a scale or
// a prefetch change waits for what is in flight), and shows it stopping.
func TestStatusAnswersWhileAGroupDrains(t *testing.T) {
	url := testenv.VHost(t)
	h := newHoldHandler(2)
	rt, _ := runtimetest.Start(t, url, handlersFlow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{"k.hold": h.handle}})
	publishN(t, url, "h", "a", 10)
	h.waitRunning(t, 2)
	stopped := make(chan error, 1)
	go func() { stopped <- rt.Stop("h.a") }()
	testenv.Eventually(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		st, err := rt.Consumer(ctx, "h.a")
		if err != nil || st.State != runtime.StateStopping {
			return testenv.Errorf("Consumer(h.a) while it drains = %+v, %v; want state %s", st, err, runtime.StateStopping)
		}
		return nil
	})
	for range 100 {
		h.release <- struct{}{}
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
