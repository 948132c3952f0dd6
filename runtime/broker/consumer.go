package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	l       *lane     // the subscription it came from; nil with c
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
		defer c.release(d.l)
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

// Handler handles one delivery. At most Concurrency calls per subscription
// run at once (more goroutines may exist around a reconnect, but they wait
// their turn). The handler must settle the Delivery, then or later;
// returning does not settle it. ctx is not cancelled when the consumer
// starts draining, only when the drain timeout passes.
type Handler func(ctx context.Context, d *Delivery)

// MaxPrefetch is the largest prefetch basic.qos carries (a 16-bit count).
const MaxPrefetch = 65535

// ConsumerOptions configures a Consumer.
type ConsumerOptions struct {
	// Queue is the queue consumed. Required.
	Queue string
	// Tag prefixes the consumer tags the broker shows. Default "acemq-flow".
	Tag string
	// Prefetch is the most unsettled deliveries the broker sends each
	// subscription (basic.qos, per consumer). Default 20. See SetPrefetch.
	Prefetch int
	// Subscriptions is how many broker consumers (basic.consume) the
	// Consumer holds on its channel, each with its own Prefetch and its own
	// handler goroutines; the broker lists each one. Default 1. See Scale.
	Subscriptions int
	// Concurrency is the number of goroutines calling the Handler for each
	// subscription. Above 1, deliveries are handled out of order. Default 1.
	Concurrency int
	// DrainTimeout bounds how long Run waits, once ctx ends, for deliveries
	// in flight to be settled (and Scale, for those of the subscriptions it
	// removes). Default 30s.
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

// Consumer consumes one queue with one or more subscriptions that share a
// channel of its own, resuming on a new channel after the channel or
// connection is lost. Create it with NewConsumer and start it with Run.
//
// The subscriptions share the channel because, to RabbitMQ, a channel is a
// process of its own: N consumers on one channel cost the broker about what
// one consumer does, N channels of one consumer each about a quarter more
// per message (measured with 32 quorum-queue consumers of prefetch 16).
// Their deliveries' acknowledgements are coalesced together (see acker).
// The price is a shared fate: an error that closes the channel (say,
// RabbitMQ's consumer_timeout for one delivery left unsettled) makes every
// subscription's deliveries in flight stale, and the broker redelivers
// them all.
type Consumer struct {
	conn *Conn
	opts ConsumerOptions
	log  *slog.Logger

	prefetch   atomic.Int32
	prefetchCh chan struct{} // signalled when prefetch changes
	seq        atomic.Int64
	running    atomic.Bool

	// mu guards the subscriptions and serialises what is done to the
	// channel's subscriptions: a session's start, a prefetch change, Scale.
	mu    sync.Mutex
	size  int     // subscriptions wanted
	lanes []*lane // while running: the subscriptions, in order
	live  *live   // the channel being consumed on, nil between channels
	h     Handler // while running
	hctx  context.Context

	inflight inFlight

	delivered, acked, nacked, rejected, stale, requeued, sessions atomic.Int64
}

// lane is one subscription, kept across channels for as long as Run runs:
// its handlers, their context and what it has in flight.
type lane struct {
	slots    chan struct{} // bounds its handlers, across channels, to Concurrency
	ctx      context.Context
	cancel   context.CancelFunc
	inflight inFlight

	// On the current channel; guarded by Consumer.mu.
	tag  string
	stop chan struct{} // closed when it stops handing out that channel's deliveries
}

// stopHanding makes the lane hand back, rather than handle, the current
// channel's deliveries; the caller holds Consumer.mu.
func (l *lane) stopHanding() {
	if l.stop != nil && !isClosed(l.stop) {
		close(l.stop)
	}
}

// inFlight counts deliveries handed out and not yet settled, and wakes
// a waiter when the count drops to zero.
type inFlight struct {
	n    atomic.Int64
	idle chan struct{} // capacity 1
}

func newInFlight() inFlight { return inFlight{idle: make(chan struct{}, 1)} }

func (f *inFlight) add() { f.n.Add(1) }

func (f *inFlight) done() {
	if f.n.Add(-1) == 0 {
		select {
		case f.idle <- struct{}{}:
		default:
		}
	}
}

// wait waits until nothing is in flight, the deadline passes, or closes
// (which may be nil) delivers, and returns how many are in flight.
func (f *inFlight) wait(deadline time.Time, closes <-chan *amqp.Error) int64 {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		if f.n.Load() == 0 {
			return 0
		}
		select {
		case <-f.idle:
		case <-t.C:
			return f.n.Load()
		case <-closes:
			return f.n.Load()
		}
	}
}

// live is the channel a session consumes on.
type live struct {
	ch *amqp.Channel
	g  *consGen
}

// NewConsumer allocates a consumer of opts.Queue on conn. It does no I/O.
func NewConsumer(conn *Conn, opts ConsumerOptions) *Consumer {
	if opts.Tag == "" {
		opts.Tag = "acemq-flow"
	}
	if opts.Prefetch <= 0 {
		opts.Prefetch = 20
	}
	opts.Prefetch = min(opts.Prefetch, MaxPrefetch)
	if opts.Subscriptions <= 0 {
		opts.Subscriptions = 1
	}
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
		prefetchCh: make(chan struct{}, 1),
		inflight:   newInFlight(),
		size:       opts.Subscriptions,
	}
	c.prefetch.Store(int32(opts.Prefetch))
	return c
}

// SetPrefetch changes the prefetch of every subscription. A running
// consumer applies it at once by setting basic.qos and re-subscribing on
// the same channel, so the deliveries it holds stay valid; a stopped one
// uses it when it runs.
func (c *Consumer) SetPrefetch(n int) error {
	if n < 1 || n > MaxPrefetch {
		return fmt.Errorf("queue %q: prefetch %d out of range 1..%d", c.opts.Queue, n, MaxPrefetch)
	}
	c.prefetch.Store(int32(n))
	// The session applies the value it reads when signalled, so the last
	// of concurrent changes wins.
	select {
	case c.prefetchCh <- struct{}{}:
	default:
	}
	return nil
}

// Scale sets the number of subscriptions. A running consumer subscribes
// the new ones on its channel at once; it removes subscriptions from the
// last one added, each cancelled on the broker, its prefetched deliveries
// handed back, and blocks until what their handlers have in flight is
// settled, up to DrainTimeout, after which their handlers' context is
// cancelled (the channel stays open for the others: a delivery still in
// flight is settled when its handler returns, and what the subscription
// had prefetched behind it is handed back then). It returns how many
// deliveries the removed subscriptions still had in flight at the
// deadline. A stopped consumer uses n when it runs; a subscription the
// broker refuses (or that times out) fails Scale, which keeps the ones it
// made and resumes them on a new channel.
func (c *Consumer) Scale(n int) (left int64, err error) {
	if n < 1 {
		return 0, fmt.Errorf("queue %q: a consumer needs at least one subscription, not %d", c.opts.Queue, n)
	}
	c.mu.Lock()
	if c.h == nil {
		c.size = n
		c.mu.Unlock()
		return 0, nil
	}
	for len(c.lanes) < n {
		l := c.newLane()
		if lv := c.live; lv != nil && !lv.ch.IsClosed() {
			start, err := c.subscribe(lv, l)
			switch {
			case err == nil:
				start()
			case lv.ch.IsClosed():
				// The channel went meanwhile: the next one subscribes the
				// lane with the others.
			default:
				l.cancel()
				c.size = len(c.lanes)
				c.abandon(lv, err)
				c.mu.Unlock()
				return 0, fmt.Errorf("queue %q: subscription %d of %d: %w", c.opts.Queue, len(c.lanes)+1, n, err)
			}
		}
		c.lanes = append(c.lanes, l)
	}
	c.size = n
	var gone []*lane
	for len(c.lanes) > n {
		l := c.lanes[len(c.lanes)-1]
		c.lanes = c.lanes[:len(c.lanes)-1]
		gone = append(gone, l)
		// Cancelled before it hands back what it holds: a delivery handed
		// back to a subscription still open could come straight back to it
		// (and, on a quorum queue, count towards the delivery limit).
		if lv := c.live; lv != nil && l.tag != "" && !lv.ch.IsClosed() {
			tag := l.tag
			if err := c.conn.call(c.hctx, "basic.cancel", func() error { return lv.ch.Cancel(tag, false) }); err != nil {
				c.abandon(lv, err)
			}
		}
		l.stopHanding()
	}
	c.mu.Unlock()
	deadline := time.Now().Add(c.opts.DrainTimeout)
	for _, l := range gone {
		left += l.inflight.wait(deadline, nil)
		l.cancel()
	}
	return left, nil
}

// Subscriptions returns how many subscriptions the consumer holds (or, when
// stopped, will hold when it runs).
func (c *Consumer) Subscriptions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
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
		InFlight:  c.inflight.n.Load(),
		Sessions:  c.sessions.Load(),
	}
}

// lostAcks counts acknowledgements that were not written because the
// channel closed first.
func (c *Consumer) lostAcks(n int64) {
	c.acked.Add(-n)
	c.stale.Add(n)
}

func (c *Consumer) release(l *lane) {
	l.inflight.done()
	c.inflight.done()
}

// newLane allocates a subscription's lane; the caller holds c.mu.
func (c *Consumer) newLane() *lane {
	ctx, cancel := context.WithCancel(c.hctx)
	return &lane{slots: make(chan struct{}, c.opts.Concurrency), ctx: ctx, cancel: cancel, inflight: newInFlight()}
}

// abandon closes lv after a subscribe or cancel on it failed outside a
// session's start: a call that timed out may still be answered, and
// amqp091-go hands a reply to whichever call waits, so the channel's next
// call could take it; a consume the broker made after all would fill a
// delivery buffer nobody reads. The session sees the channel close and
// subscribes every lane on a new one (the deliveries in flight become
// stale, as with any lost channel). The caller holds c.mu.
func (c *Consumer) abandon(lv *live, cause error) {
	c.log.Warn("consumer channel closed after a failed subscription change; resuming on a new channel", "error", cause)
	_ = c.conn.call(context.Background(), "close consumer channel", lv.ch.Close)
}

// Run consumes until ctx ends, calling h for each delivery from
// Concurrency goroutines per subscription, and resumes on a new channel
// whenever the channel or the connection is lost (deliveries of the lost
// channel become stale; the broker redelivers them). When ctx ends it
// drains:
//
//  1. it cancels the subscriptions, so the broker sends nothing more, and
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
	c.mu.Lock()
	c.h, c.hctx = h, hctx
	for range c.size {
		c.lanes = append(c.lanes, c.newLane())
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		for _, l := range c.lanes {
			l.cancel()
		}
		c.h, c.hctx, c.lanes = nil, nil, nil
		c.mu.Unlock()
	}()

	var (
		result   error
		left     int64
		drained  bool
		failures int
	)
	for {
		var started bool
		drained, left, started, result = c.session(ctx)
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
		left = c.inflight.wait(time.Now().Add(c.opts.DrainTimeout), nil)
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

// subscribe subscribes lane l on lv, with a stop of its own for that
// channel unless it has one already (a re-subscription after a prefetch
// change); start starts its handler goroutines. The caller holds c.mu.
// After a failure the caller closes the channel: the consume may have
// outlived its deadline and be made after all, and a cancel sent meanwhile
// could be handed the consume's reply.
func (c *Consumer) subscribe(lv *live, l *lane) (start func(), err error) {
	tag := fmt.Sprintf("%s-%d", c.opts.Tag, c.seq.Add(1))
	var dels <-chan amqp.Delivery
	err = c.conn.call(c.hctx, fmt.Sprintf("consume queue %q", c.opts.Queue), func() error {
		var err error
		dels, err = lv.ch.Consume(c.opts.Queue, tag, false, false, false, false, c.opts.Args)
		return err
	})
	if err != nil {
		return nil, err
	}
	l.tag = tag
	if l.stop == nil || isClosed(l.stop) {
		l.stop = make(chan struct{})
	}
	stop, h := l.stop, c.h
	// The handler goroutines read the library's delivery channel directly:
	// no extra hand-off per message. They do not hold up the next channel
	// when this one dies; the lane's slots keep its handlers running at
	// once to Concurrency.
	return func() {
		for range c.opts.Concurrency {
			go c.handle(dels, lv.g, l, stop, h)
		}
	}, nil
}

// session consumes on one channel until it closes or ctx ends; when ctx
// ends it drains and reports drained=true.
func (c *Consumer) session(ctx context.Context) (drained bool, left int64, started bool, err error) {
	ch, err := c.conn.Channel(ctx)
	if err != nil {
		return false, 0, false, err
	}
	lv := &live{ch: ch, g: &consGen{ch: ch, ack: newAcker(ch, c.lostAcks)}}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	// The broker cancels every subscription of a deleted queue: read them
	// all, so that the library never blocks on a full listener, and keep
	// the first for the loop.
	cancelled := make(chan string, 1)
	cancels := ch.NotifyCancel(make(chan string, 1))
	go func() {
		for t := range cancels {
			select {
			case cancelled <- t:
			default:
			}
		}
	}()

	// stopAll ends the lanes' handing out of this channel's deliveries and
	// forgets the channel; the caller holds c.mu.
	stopAll := func() {
		c.live = nil
		for _, l := range c.lanes {
			l.stopHanding()
		}
	}
	// lost ends the session on a channel that is gone or going.
	lost := func() {
		c.mu.Lock()
		stopAll()
		c.mu.Unlock()
		lv.g.retire()
	}
	end := func(cause error) (bool, int64, bool, error) {
		lost()
		_ = c.conn.call(context.WithoutCancel(ctx), "close consumer channel", ch.Close)
		return false, 0, started, cause
	}

	c.mu.Lock()
	n := int(c.prefetch.Load())
	if err := c.conn.call(ctx, "basic.qos", func() error { return ch.Qos(n, 0, false) }); err != nil {
		c.mu.Unlock()
		return end(err)
	}
	// Every subscription is made before any handler starts: one that fails
	// ends the channel, and with it the others' deliveries, which must not
	// have been handled yet (they would be handled again on the next).
	starts := make([]func(), 0, len(c.lanes))
	for _, l := range c.lanes {
		l.stop = nil
		start, err := c.subscribe(lv, l)
		if err != nil {
			c.mu.Unlock()
			return end(err)
		}
		starts = append(starts, start)
	}
	for _, start := range starts {
		start()
	}
	c.live = lv
	subs := len(c.lanes)
	c.mu.Unlock()
	started = true
	c.sessions.Add(1)
	c.log.Debug("consumer subscribed", "subscriptions", subs, "prefetch", n)

	for {
		select {
		case <-ctx.Done():
			return c.drain(lv, stopAll, closes)
		case e, ok := <-closes:
			var cause error = errors.New("channel closed")
			if ok && e != nil {
				cause = e
			}
			lost()
			return false, 0, true, cause
		case t := <-cancelled:
			// basic.cancel from the broker: the queue was deleted.
			return end(fmt.Errorf("the broker cancelled consumer %s of queue %q (queue deleted?)", t, c.opts.Queue))
		case <-c.prefetchCh:
			// A consumer's prefetch is fixed when it subscribes: set the new
			// qos, subscribe again on the same channel, then cancel the old
			// subscription. Deliveries held stay valid (same channel).
			n := int(c.prefetch.Load())
			c.mu.Lock()
			err := c.resubscribe(lv, n)
			c.mu.Unlock()
			if err != nil {
				return end(err)
			}
			c.log.Info("consumer prefetch changed", "prefetch", n)
		}
	}
}

// resubscribe sets prefetch n on lv and subscribes every lane again; the
// caller holds c.mu. Its calls are bounded by the operation timeout, not
// by Run's context: a shutdown that comes meanwhile drains once they end,
// rather than closing the channel under the handlers in flight.
func (c *Consumer) resubscribe(lv *live, n int) error {
	if err := c.conn.call(c.hctx, "basic.qos", func() error { return lv.ch.Qos(n, 0, false) }); err != nil {
		return err
	}
	for _, l := range c.lanes {
		old := l.tag
		start, err := c.subscribe(lv, l)
		if err != nil {
			return err
		}
		start()
		if err := c.conn.call(c.hctx, "basic.cancel", func() error { return lv.ch.Cancel(old, false) }); err != nil {
			return err
		}
	}
	return nil
}

func (c *Consumer) drain(lv *live, stopAll func(), closes <-chan *amqp.Error) (bool, int64, bool, error) {
	deadline := time.Now().Add(c.opts.DrainTimeout)
	// Stop the broker sending, then hand out nothing more and hand back
	// what was prefetched but not handled. Cancelled first: a delivery
	// handed back to a subscription still open could come straight back
	// to it (and, on a quorum queue, count towards the delivery limit).
	bg := context.Background()
	c.mu.Lock()
	tags := make([]string, 0, len(c.lanes))
	for _, l := range c.lanes {
		tags = append(tags, l.tag)
	}
	c.live = nil // Scale changes this channel's subscriptions no more
	c.mu.Unlock()
	for _, tag := range tags {
		_ = c.conn.call(bg, "basic.cancel", func() error { return lv.ch.Cancel(tag, false) })
	}
	c.mu.Lock()
	stopAll()
	c.mu.Unlock()
	c.log.Info("consumer draining", "subscriptions", len(tags), "left", c.inflight.n.Load())
	// A closed channel means the broker has requeued everything unsettled
	// on it: nothing more to wait for.
	left := c.inflight.wait(deadline, closes)
	// Write the acks still waiting before the channel closes, or the
	// broker would deliver those messages again.
	lv.g.retire()
	_ = c.conn.call(bg, "close consumer channel", lv.ch.Close)
	return true, left, true, nil
}

// handle calls the handler for each delivery of one subscription; once
// the lane stops handing out this channel's deliveries (draining, removed,
// or the channel is gone) it hands them back to the broker instead. It
// returns when the library closes the delivery channel.
func (c *Consumer) handle(dels <-chan amqp.Delivery, g *consGen, l *lane, stop chan struct{}, h Handler) {
	for ad := range dels {
		c.delivered.Add(1)
		c.inflight.add()
		l.inflight.add()
		d := &Delivery{Delivery: ad, c: c, l: l, g: g}
		if isClosed(stop) {
			c.handBack(d)
			continue
		}
		select {
		case l.slots <- struct{}{}:
		case <-stop:
			c.handBack(d)
			continue
		}
		if isClosed(stop) {
			<-l.slots
			c.handBack(d)
			continue
		}
		h(l.ctx, d)
		<-l.slots
	}
}

func (c *Consumer) handBack(d *Delivery) {
	_ = d.nack(true, countRequeued)
}
