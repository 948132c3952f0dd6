package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Delivery is one message handed to a Handler. The embedded amqp.Delivery
// carries the body, properties, headers and the redelivered flag; settle it
// only through the methods below, never through its Acknowledger.
//
// A Delivery is bound to the channel that received it. Exactly one of Ack,
// Nack or Reject must be called, from any goroutine, at any time (a handler
// may return first and acknowledge later, typically when the publish of what
// it produced is confirmed). If that channel has closed in the meantime,
// nothing is sent and ErrStaleDelivery is returned: the broker has already
// requeued the message and will deliver it again, and an ack on another
// channel would settle a different message or close the channel.
type Delivery struct {
	amqp.Delivery
	c       *Consumer // nil for a Delivery from Topology.Get
	g       *consGen
	settled atomic.Bool
}

// retire ends the channel's settling: a settle from now on is stale, and
// the acks recorded before are written (or counted lost when the channel is
// already gone).
func (g *consGen) retire() {
	g.dead.Store(true)
	g.ack.close()
}

type consGen struct {
	ch   *amqp.Channel
	ack  *acker // nil for basic.get: acks are then written one by one
	dead atomic.Bool
	stop chan struct{} // closed when the consumer stops handing out this channel's deliveries
}

// Ack acknowledges the delivery: the broker forgets the message. A
// consumed delivery's ack is written shortly after Ack returns, coalesced
// with others of its channel (see acker); if the channel closes first, the
// broker redelivers the message, as it would had the ack been lost on the
// way.
func (d *Delivery) Ack() error {
	if a := d.g.ack; a != nil {
		return d.settle(func() error {
			if !a.ack(d.DeliveryTag) {
				return errors.New("the channel's acknowledgements have ended")
			}
			return nil
		}, countAcked)
	}
	return d.settle(func() error { return d.g.ch.Ack(d.DeliveryTag, false) }, countAcked)
}

// Nack negatively acknowledges the delivery; with requeue the broker
// delivers it again, without it the broker dead-letters it (when the queue
// has a dead-letter exchange) or drops it.
func (d *Delivery) Nack(requeue bool) error {
	return d.nack(requeue, countNacked)
}

func (d *Delivery) nack(requeue bool, count func(*Consumer) *atomic.Int64) error {
	return d.settle(func() error { return d.written(d.g.ch.Nack(d.DeliveryTag, false, requeue)) }, count)
}

// Reject is Nack for one message, sent as basic.reject.
func (d *Delivery) Reject(requeue bool) error {
	return d.settle(func() error { return d.written(d.g.ch.Reject(d.DeliveryTag, requeue)) }, countRejected)
}

// The counter a settlement adds to.
func countAcked(c *Consumer) *atomic.Int64    { return &c.acked }
func countNacked(c *Consumer) *atomic.Int64   { return &c.nacked }
func countRejected(c *Consumer) *atomic.Int64 { return &c.rejected }
func countRequeued(c *Consumer) *atomic.Int64 { return &c.requeued }

// written tells the channel's acker that the delivery was settled on the
// broker, once its nack or reject is written, so coalesced acks can pass
// over its tag.
func (d *Delivery) written(err error) error {
	if err == nil && d.g.ack != nil {
		d.g.ack.settled(d.DeliveryTag)
	}
	return err
}

// settle sends one settlement and counts it, once per delivery; a
// settlement on a closed channel sends nothing and counts as stale.
func (d *Delivery) settle(send func() error, count func(*Consumer) *atomic.Int64) error {
	if !d.settled.CompareAndSwap(false, true) {
		return ErrAlreadySettled
	}
	c := d.c
	if c != nil {
		defer c.release()
	}
	if d.g.dead.Load() {
		if c != nil {
			c.stale.Add(1)
		}
		return ErrStaleDelivery
	}
	if err := send(); err != nil {
		// The only failures are a closed channel or connection; either way
		// the broker requeues the message.
		if c != nil {
			c.stale.Add(1)
		}
		return fmt.Errorf("%w (%v)", ErrStaleDelivery, err)
	}
	if c != nil {
		count(c).Add(1)
	}
	return nil
}

// Handler handles one delivery. At most Concurrency calls run at once
// (more goroutines may exist around a reconnect, but they wait their turn).
// The handler must settle the Delivery, then or later; returning does not
// settle it. ctx is not cancelled when the consumer starts draining, only
// when the drain timeout passes.
type Handler func(ctx context.Context, d *Delivery)

// ConsumerOptions configures a Consumer.
type ConsumerOptions struct {
	// Queue is the queue consumed. Required.
	Queue string
	// Tag prefixes the consumer tags the broker shows. Default "acemq-flow".
	Tag string
	// Prefetch is the most unsettled deliveries the broker sends this
	// consumer (basic.qos, per consumer). Default 20. See SetPrefetch.
	Prefetch int
	// Concurrency is the number of goroutines calling the Handler. Above 1,
	// deliveries are handled out of order. Default 1.
	Concurrency int
	// DrainTimeout bounds how long Run waits, once ctx ends, for deliveries
	// in flight to be settled. Default 30s.
	DrainTimeout time.Duration
	// Args are passed with basic.consume (e.g. x-priority).
	Args amqp.Table
	// Log receives lifecycle events; nil discards them.
	Log *slog.Logger
}

// ConsumerStats are running totals since NewConsumer.
type ConsumerStats struct {
	Delivered int64 // received from the broker
	Acked     int64
	Nacked    int64
	Rejected  int64
	Stale     int64 // settled after their channel closed (nothing sent)
	Requeued  int64 // received while draining and handed back unhandled
	InFlight  int64 // handed to a handler and not settled
	Sessions  int64 // channels the consumer has consumed on
}

// Consumer consumes one queue on a channel of its own, resuming on a new
// channel after the channel or connection is lost. Create it with
// NewConsumer and start it with Run.
type Consumer struct {
	conn *Conn
	opts ConsumerOptions
	log  *slog.Logger

	prefetch   atomic.Int32
	prefetchCh chan int
	seq        atomic.Int64
	running    atomic.Bool

	inflight atomic.Int64
	idle     chan struct{}

	delivered, acked, nacked, rejected, stale, requeued, sessions atomic.Int64
}

// NewConsumer allocates a consumer of opts.Queue on conn. It does no I/O.
func NewConsumer(conn *Conn, opts ConsumerOptions) *Consumer {
	if opts.Tag == "" {
		opts.Tag = "acemq-flow"
	}
	if opts.Prefetch <= 0 {
		opts.Prefetch = 20
	}
	opts.Prefetch = min(opts.Prefetch, 65535)
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	c := &Consumer{
		conn:       conn,
		opts:       opts,
		log:        opts.Log.With("queue", opts.Queue),
		prefetchCh: make(chan int, 1),
		idle:       make(chan struct{}, 1),
	}
	c.prefetch.Store(int32(opts.Prefetch))
	return c
}

// SetPrefetch changes the prefetch. A running consumer applies it at once
// by setting basic.qos and re-subscribing on the same channel, so the
// deliveries it holds stay valid; a stopped one uses it when it runs.
func (c *Consumer) SetPrefetch(n int) error {
	if n < 1 || n > 65535 {
		return fmt.Errorf("queue %q: prefetch %d out of range 1..65535", c.opts.Queue, n)
	}
	c.prefetch.Store(int32(n))
	for {
		select {
		case c.prefetchCh <- n:
			return nil
		default:
		}
		select {
		case <-c.prefetchCh:
		default:
		}
	}
}

// Stats returns running totals.
func (c *Consumer) Stats() ConsumerStats {
	return ConsumerStats{
		Delivered: c.delivered.Load(),
		Acked:     c.acked.Load(),
		Nacked:    c.nacked.Load(),
		Rejected:  c.rejected.Load(),
		Stale:     c.stale.Load(),
		Requeued:  c.requeued.Load(),
		InFlight:  c.inflight.Load(),
		Sessions:  c.sessions.Load(),
	}
}

// lostAcks counts acknowledgements that were not written because the
// channel closed first.
func (c *Consumer) lostAcks(n int64) {
	c.acked.Add(-n)
	c.stale.Add(n)
}

func (c *Consumer) release() {
	if c.inflight.Add(-1) == 0 {
		select {
		case c.idle <- struct{}{}:
		default:
		}
	}
}

// Run consumes until ctx ends, calling h for each delivery from
// Concurrency goroutines, and resumes on a new channel whenever the channel
// or the connection is lost (deliveries of the lost channel become stale;
// the broker redelivers them). When ctx ends it drains:
//
//  1. it cancels the subscription, so the broker sends nothing more, and
//     hands back (nack, requeue) deliveries received but not yet handled;
//  2. it waits up to DrainTimeout for the deliveries in flight to be
//     settled, then cancels the handlers' context;
//  3. it closes the channel, which requeues whatever is left.
//
// Run returns nil after a complete drain, a *DrainError naming how many
// deliveries were left, or an error wrapping ErrClosed when the Conn was
// closed under it. A Consumer runs once at a time.
func (c *Consumer) Run(ctx context.Context, h Handler) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("queue %q: consumer is already running", c.opts.Queue)
	}
	defer c.running.Store(false)

	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	r := &run{h: h, ctx: hctx, slots: make(chan struct{}, c.opts.Concurrency)}

	var (
		result   error
		left     int64
		drained  bool
		failures int
	)
	for {
		var started bool
		drained, left, started, result = c.session(ctx, r)
		if drained || ctx.Err() != nil || errors.Is(result, ErrClosed) {
			break
		}
		if started {
			failures = 0
		}
		d := backoff(failures, c.conn.opts.BackoffMin, c.conn.opts.BackoffMax)
		failures++
		c.log.Warn("consumer interrupted; resuming", "error", result, "duration", d)
		if !sleepCtx(ctx, d) {
			break
		}
	}
	if !drained {
		// ctx ended between channels: nothing is on a live channel, but
		// handlers may still be running.
		left = c.waitDrained(time.Now().Add(c.opts.DrainTimeout), nil)
	}
	hcancel()
	if left > 0 {
		err := &DrainError{Queue: c.opts.Queue, Left: int(left), After: c.opts.DrainTimeout}
		c.log.Warn("consumer drained with messages left", "left", left, "error", err)
		return err
	}
	if errors.Is(result, ErrClosed) && ctx.Err() == nil {
		return fmt.Errorf("queue %q: %w", c.opts.Queue, result)
	}
	c.log.Debug("consumer drained", "left", 0)
	return nil
}

// run is what the handler goroutines of one Run share across channels.
type run struct {
	h     Handler
	ctx   context.Context
	slots chan struct{} // bounds handlers across channels to Concurrency
}

// session consumes on one channel until it closes or ctx ends; when ctx
// ends it drains and reports drained=true.
func (c *Consumer) session(ctx context.Context, r *run) (drained bool, left int64, started bool, err error) {
	ch, err := c.conn.Channel(ctx)
	if err != nil {
		return false, 0, false, err
	}
	stop := make(chan struct{})
	g := &consGen{ch: ch, stop: stop, ack: newAcker(ch, c.lostAcks)}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	cancels := ch.NotifyCancel(make(chan string, 4))

	end := func(cause error) (bool, int64, bool, error) {
		g.retire()
		close(stop)
		_ = c.conn.call(context.WithoutCancel(ctx), "close consumer channel", ch.Close)
		return false, 0, started, cause
	}

	n := int(c.prefetch.Load())
	if err := c.conn.call(ctx, "basic.qos", func() error { return ch.Qos(n, 0, false) }); err != nil {
		return end(err)
	}
	consume := func() (string, error) {
		tag := fmt.Sprintf("%s-%d", c.opts.Tag, c.seq.Add(1))
		var dels <-chan amqp.Delivery
		err := c.conn.call(ctx, fmt.Sprintf("consume queue %q", c.opts.Queue), func() error {
			var err error
			dels, err = ch.Consume(c.opts.Queue, tag, false, false, false, false, c.opts.Args)
			return err
		})
		if err != nil {
			return "", err
		}
		// The handler goroutines read the library's delivery channel
		// directly: no extra hand-off per message. They do not hold up the
		// next channel when this one dies; the shared slots keep the
		// handlers running at once to Concurrency.
		for range c.opts.Concurrency {
			go c.handle(dels, g, r)
		}
		return tag, nil
	}
	tag, err := consume()
	if err != nil {
		return end(err)
	}
	started = true
	c.sessions.Add(1)
	c.log.Debug("consumer subscribed", "consumer", tag, "prefetch", n)

	for {
		select {
		case <-ctx.Done():
			return c.drain(ch, g, tag, closes)
		case e, ok := <-closes:
			var cause error = errors.New("channel closed")
			if ok && e != nil {
				cause = e
			}
			g.retire()
			close(stop)
			return false, 0, true, cause
		case t, ok := <-cancels:
			if !ok {
				cancels = nil
				continue
			}
			if t == tag {
				// basic.cancel from the broker: the queue was deleted.
				return end(fmt.Errorf("the broker cancelled the consumer of queue %q (queue deleted?)", c.opts.Queue))
			}
		case n := <-c.prefetchCh:
			// A consumer's prefetch is fixed when it subscribes: set the new
			// qos, subscribe again on the same channel, then cancel the old
			// subscription. Deliveries held stay valid (same channel).
			if err := c.conn.call(ctx, "basic.qos", func() error { return ch.Qos(n, 0, false) }); err != nil {
				return end(err)
			}
			next, err := consume()
			if err != nil {
				return end(err)
			}
			old := tag
			tag = next
			if err := c.conn.call(ctx, "basic.cancel", func() error { return ch.Cancel(old, false) }); err != nil {
				return end(err)
			}
			c.log.Info("consumer prefetch changed", "consumer", tag, "prefetch", n)
		}
	}
}

func (c *Consumer) drain(ch *amqp.Channel, g *consGen, tag string, closes <-chan *amqp.Error) (bool, int64, bool, error) {
	deadline := time.Now().Add(c.opts.DrainTimeout)
	// Hand out nothing more, stop the broker sending, and hand back what was
	// prefetched but not handled.
	close(g.stop)
	bg := context.Background()
	_ = c.conn.call(bg, "basic.cancel", func() error { return ch.Cancel(tag, false) })
	c.log.Info("consumer draining", "consumer", tag, "left", c.inflight.Load())
	left := c.waitDrained(deadline, closes)
	// Write the acks still waiting before the channel closes, or the
	// broker would deliver those messages again.
	g.retire()
	_ = c.conn.call(bg, "close consumer channel", ch.Close)
	return true, left, true, nil
}

// handle calls the handler for each delivery of one subscription; once the
// consumer stops handing out this channel's deliveries (draining, or the
// channel is gone) it hands them back to the broker instead. It returns
// when the library closes the delivery channel.
func (c *Consumer) handle(dels <-chan amqp.Delivery, g *consGen, r *run) {
	for ad := range dels {
		c.delivered.Add(1)
		c.inflight.Add(1)
		d := &Delivery{Delivery: ad, c: c, g: g}
		if isClosed(g.stop) {
			c.handBack(d)
			continue
		}
		select {
		case r.slots <- struct{}{}:
		case <-g.stop:
			c.handBack(d)
			continue
		}
		if isClosed(g.stop) {
			<-r.slots
			c.handBack(d)
			continue
		}
		r.h(r.ctx, d)
		<-r.slots
	}
}

func (c *Consumer) handBack(d *Delivery) {
	_ = d.nack(true, countRequeued)
}

// waitDrained waits until no delivery is in flight, the deadline passes, or
// the channel closes, and returns how many are in flight.
func (c *Consumer) waitDrained(deadline time.Time, closes <-chan *amqp.Error) int64 {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		n := c.inflight.Load()
		if n == 0 {
			return 0
		}
		select {
		case <-c.idle:
		case <-t.C:
			return c.inflight.Load()
		case <-closes:
			// The broker has requeued everything unsettled on the channel.
			return c.inflight.Load()
		}
	}
}
