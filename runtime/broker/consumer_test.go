package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

// runConsumer runs c in the background and returns the deliveries it hands
// out and a function that stops it and returns Run's result.
func runConsumer(t *testing.T, c *Consumer, h Handler) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- c.Run(ctx, h) }()
	var once bool
	var err error
	stop = func() error {
		if !once {
			once = true
			cancel()
			err = <-res
		}
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

func receive(t *testing.T, ch <-chan *Delivery) *Delivery {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery within 30s")
		return nil
	}
}

func TestStaleDeliveryIsNeverAckedOnTheNewChannel(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 8)
	cc := e.conn("consume")
	c := NewConsumer(cc, ConsumerOptions{Queue: q, Prefetch: 10, Log: e.log})
	got := make(chan *Delivery, 10)
	runConsumer(t, c, func(_ context.Context, d *Delivery) { got <- d })

	if err := p.Publish(t.Context(), msg(q, "m-1", nil)); err != nil {
		t.Fatal(err)
	}
	old := receive(t, got)

	closeConnection(t, cc.Name())
	again := receive(t, got)
	if again.MessageId != "m-1" || !again.Redelivered {
		t.Fatalf("after reconnect got %q redelivered=%v, want m-1 redelivered", again.MessageId, again.Redelivered)
	}
	if old.DeliveryTag != again.DeliveryTag {
		t.Logf("delivery tags differ (%d, %d); the check below still holds", old.DeliveryTag, again.DeliveryTag)
	}
	// Had the old ack gone out on the new channel, it would have settled
	// the redelivery (same tag), and the ack below would close the channel
	// with 406 unknown delivery tag.
	if err := old.Ack(); !errors.Is(err, ErrStaleDelivery) {
		t.Fatalf("Ack(stale) = %v, want ErrStaleDelivery", err)
	}
	if err := again.Ack(); err != nil {
		t.Fatalf("Ack(redelivery) = %v", err)
	}
	if err := p.Publish(t.Context(), msg(q, "m-2", nil)); err != nil {
		t.Fatal(err)
	}
	third := receive(t, got)
	if err := third.Ack(); err != nil || third.MessageId != "m-2" {
		t.Fatalf("third delivery %q ack = %v", third.MessageId, err)
	}
	e.waitDepth(q, 0)
	if s := c.Stats(); s.Sessions != 2 || s.Stale != 1 || s.Acked != 2 {
		t.Errorf("Stats() = %+v, want 2 sessions (no channel closed by the stale ack), 1 stale, 2 acked", s)
	}
}

func TestDrainWaitsForDeliveriesInFlight(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 8)
	c := NewConsumer(e.conn("consume"), ConsumerOptions{Queue: q, Prefetch: 10, Concurrency: 2, Log: e.log})
	started := make(chan *Delivery, 10)
	release := make(chan struct{})
	handlerCtxDone := make(chan error, 10)
	stop := runConsumer(t, c, func(ctx context.Context, d *Delivery) {
		started <- d
		<-release
		handlerCtxDone <- ctx.Err()
		d.Ack()
	})
	for i := range 5 {
		if err := p.Publish(t.Context(), msg(q, fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, started)
	receive(t, started)

	res := make(chan error, 1)
	go func() { res <- stop() }()
	testenv.Eventually(t, 10*time.Second, func() error {
		if strings.Contains(e.logs.String(), "consumer draining") {
			return nil
		}
		return fmt.Errorf("the consumer has not started draining")
	})
	select {
	case err := <-res:
		t.Fatalf("Run returned %v while two handlers were in flight", err)
	default:
	}
	close(release)
	if err := <-res; err != nil {
		t.Fatalf("Run after the handlers finished = %v, want nil", err)
	}
	for range 2 {
		if err := <-handlerCtxDone; err != nil {
			t.Errorf("handler ctx during the drain = %v, want live", err)
		}
	}
	// The two handled are acknowledged; the three prefetched but not
	// handled went back to the queue.
	e.waitDepth(q, 3)
	if s := c.Stats(); s.Acked != 2 || s.InFlight != 0 {
		t.Errorf("Stats() = %+v, want 2 acked, none in flight", s)
	}
}

func TestDrainReportsWhatWasLeft(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 8)
	c := NewConsumer(e.conn("consume"), ConsumerOptions{Queue: q, Prefetch: 10, Concurrency: 3, DrainTimeout: 300 * time.Millisecond, Log: e.log})
	started := make(chan *Delivery, 10)
	stop := runConsumer(t, c, func(ctx context.Context, d *Delivery) {
		started <- d
		<-ctx.Done() // a handler that only stops when told to
	})
	for i := range 3 {
		if err := p.Publish(t.Context(), msg(q, fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		receive(t, started)
	}
	err := stop()
	var de *DrainError
	if !errors.As(err, &de) || de.Left != 3 || de.Queue != q {
		t.Fatalf("Run = %v, want a *DrainError with 3 left on %s", err, q)
	}
	// Closing the channel requeued them.
	e.waitDepth(q, 3)
}

func TestSetPrefetchAppliesToARunningConsumer(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 8)
	c := NewConsumer(e.conn("consume"), ConsumerOptions{Queue: q, Prefetch: 1, Log: e.log})
	got := make(chan *Delivery, 10)
	runConsumer(t, c, func(_ context.Context, d *Delivery) { got <- d })
	for i := range 6 {
		if err := p.Publish(t.Context(), msg(q, fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	held := []*Delivery{receive(t, got)}
	e.waitDepth(q, 5) // prefetch 1: one delivered, five ready

	if err := c.SetPrefetch(3); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		held = append(held, receive(t, got))
	}
	e.waitDepth(q, 2)
	for _, d := range held {
		if err := d.Ack(); err != nil {
			t.Errorf("Ack(%s) = %v, want nil: deliveries from before the change stay valid", d.MessageId, err)
		}
	}
	for range 2 {
		if err := receive(t, got).Ack(); err != nil {
			t.Error(err)
		}
	}
	e.waitDepth(q, 0)
	if s := c.Stats(); s.Sessions != 1 || s.Acked != 6 {
		t.Errorf("Stats() = %+v, want one session and 6 acked", s)
	}
	if err := c.SetPrefetch(0); err == nil {
		t.Error("SetPrefetch(0) = nil, want an error")
	}
}

func TestConsumerResumesWhenTheQueueAppears(t *testing.T) {
	e := newEnv(t)
	q := e.ns + "-late"
	c := NewConsumer(e.conn("consume"), ConsumerOptions{Queue: q, Log: e.log})
	got := make(chan *Delivery, 1)
	runConsumer(t, c, func(_ context.Context, d *Delivery) { got <- d })
	testenv.Eventually(t, 10*time.Second, func() error {
		if strings.Contains(e.logs.String(), "consumer interrupted; resuming") {
			return nil
		}
		return fmt.Errorf("the consumer has not tried the missing queue yet")
	})
	e.queue("late", "classic")
	p := e.publisher(e.conn("pub"), 8)
	if err := p.Publish(t.Context(), msg(q, "m-1", nil)); err != nil {
		t.Fatal(err)
	}
	d := receive(t, got)
	if d.MessageId != "m-1" {
		t.Fatalf("got %q, want m-1", d.MessageId)
	}
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
}

// brokerConsumers lists the consumers RabbitMQ shows on queue: their
// channels and prefetch counts.
func brokerConsumers(t *testing.T, url, queue string) (channels map[string]int, prefetch []string) {
	t.Helper()
	channels = map[string]int{}
	for _, c := range testenv.BrokerConsumers(t, url, queue) {
		channels[c.Channel]++
		prefetch = append(prefetch, c.Prefetch)
	}
	return channels, prefetch
}

func TestSubscriptionsShareOneChannelAndScaleDownDrainsTheRemovedOnes(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 8)
	c := NewConsumer(e.conn("consume"), ConsumerOptions{Queue: q, Prefetch: 2, Subscriptions: 3, Log: e.log})
	// Each handler runs until the test settles its delivery.
	type call struct {
		d    *Delivery
		done chan struct{}
	}
	calls := make(chan call, 10)
	runConsumer(t, c, func(_ context.Context, d *Delivery) {
		done := make(chan struct{})
		calls <- call{d, done}
		<-done
	})
	next := func() call {
		t.Helper()
		select {
		case c := <-calls:
			return c
		case <-time.After(30 * time.Second):
			t.Fatal("no handler call within 30s")
			return call{}
		}
	}
	ack := func(c call) {
		t.Helper()
		if err := c.d.Ack(); err != nil {
			t.Fatal(err)
		}
		close(c.done)
	}
	subscribed := func(n int) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, func() error {
			chans, pf := brokerConsumers(t, e.url, q)
			if len(pf) != n || len(chans) != 1 || slices.ContainsFunc(pf, func(p string) bool { return p != "2" }) {
				return fmt.Errorf("the broker shows consumers on channels %v with prefetch %v; want %d of prefetch 2 on one channel", chans, pf, n)
			}
			return nil
		})
	}
	subscribed(3)

	for i := range 6 {
		if err := p.Publish(t.Context(), msg(q, fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	// One handler at a time per subscription: three handled, three held
	// in their prefetch.
	var handling []call
	for range 3 {
		handling = append(handling, next())
	}
	c.mu.Lock()
	removed := map[*lane]bool{c.lanes[1]: true, c.lanes[2]: true}
	c.mu.Unlock()

	type scaled struct {
		left int64
		err  error
	}
	res := make(chan scaled, 1)
	go func() {
		left, err := c.Scale(1)
		res <- scaled{left, err}
	}()
	subscribed(1)
	select {
	case r := <-res:
		t.Fatalf("Scale(1) returned %+v while the removed subscriptions had deliveries in flight", r)
	default:
	}
	var kept []call
	for _, hc := range handling {
		if removed[hc.d.l] {
			ack(hc)
		} else {
			kept = append(kept, hc)
		}
	}
	if r := <-res; r.err != nil || r.left != 0 {
		t.Fatalf("Scale(1) = %d, %v; want 0 left once their deliveries were settled", r.left, r.err)
	}
	// What the removed subscriptions held unhandled went back to the queue
	// and comes round to the one left.
	acked := len(handling) - len(kept)
	for _, hc := range kept {
		ack(hc)
		acked++
	}
	for acked < 6 {
		hc := next()
		if removed[hc.d.l] {
			t.Fatalf("delivery %s came from a removed subscription", hc.d.MessageId)
		}
		ack(hc)
		acked++
	}
	e.waitDepth(q, 0)
	if s := c.Stats(); s.Acked != 6 || s.InFlight != 0 || s.Sessions != 1 {
		t.Errorf("Stats() = %+v, want 6 acked, none in flight, one session", s)
	}
	if _, err := c.Scale(4); err != nil {
		t.Fatal(err)
	}
	subscribed(4)
}

// A drain stopped while deliveries stream in hands back each prefetched
// delivery once: the subscription is cancelled before the hand-back, as a
// delivery handed back to a subscription still open can come straight back
// to it and be handed back again, each time counting towards a quorum
// queue's delivery limit.
func TestDrainHandsBackEachPrefetchedDeliveryOnce(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 256)
	const n, prefetch = 1000, 200
	for i := range n {
		if err := p.Publish(t.Context(), msg(q, fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	c := NewConsumer(e.conn("consume"), ConsumerOptions{Queue: q, Prefetch: prefetch, Log: e.log})
	handled := make(chan struct{}, n)
	stop := runConsumer(t, c, func(_ context.Context, d *Delivery) {
		d.Ack()
		handled <- struct{}{}
	})
	// Stop while deliveries stream in, the subscription's prefetch full.
	for range prefetch {
		<-handled
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	if s.Requeued > prefetch || s.Delivered != s.Acked+s.Requeued {
		t.Fatalf("Stats() = %+v: want at most %d handed back (the prefetch), each delivery acknowledged or handed back once", s, prefetch)
	}
	e.waitDepth(q, n-int(s.Acked))
	topo := NewTopology(e.conn("get"), e.log)
	t.Cleanup(func() { topo.Close() })
	for range n - int(s.Acked) {
		d, err := topo.Get(t.Context(), q)
		if err != nil || d == nil {
			t.Fatalf("Get = %v, %v", d, err)
		}
		if dc, _ := d.Headers["x-delivery-count"].(int64); dc > 1 {
			t.Fatalf("message %s was returned to the queue %d times, want at most once", d.MessageId, dc)
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
}

// A shutdown that comes while a prefetch change re-subscribes still
// drains: the handler in flight finishes and acknowledges on the open
// channel. Before, the change's calls ended with Run's context, the channel
// was closed under the handler, and its message was delivered again.
func TestShutdownDuringAPrefetchChangeDrains(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 8)
	cc := e.conn("consume")
	for i := range 5 {
		if err := p.Publish(t.Context(), msg(q, fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
		c := NewConsumer(cc, ConsumerOptions{Queue: q, Prefetch: 1, Log: e.log})
		got := make(chan *Delivery, 1)
		release := make(chan struct{})
		acked := make(chan error, 1)
		stop := runConsumer(t, c, func(_ context.Context, d *Delivery) {
			got <- d
			<-release
			acked <- d.Ack()
		})
		receive(t, got)
		if err := c.SetPrefetch(2 + i); err != nil {
			t.Fatal(err)
		}
		res := make(chan error, 1)
		go func() { res <- stop() }()
		var ran error
		testenv.Eventually(t, 10*time.Second, func() error {
			select {
			case ran = <-res:
				return nil
			default:
			}
			c.mu.Lock()
			live := c.live
			c.mu.Unlock()
			if c.Stats().Sessions == 1 && live == nil {
				return nil // draining (or between channels)
			}
			return errors.New("Run is neither draining nor done")
		})
		close(release)
		if err := <-acked; err != nil {
			t.Fatalf("round %d: the handler's ack = %v, want nil (drained on the open channel)", i, err)
		}
		if ran == nil {
			ran = <-res
		}
		if ran != nil {
			t.Fatalf("round %d: Run = %v, want nil", i, ran)
		}
		e.waitDepth(q, 0)
	}
}
