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

// Message is one publish: where it goes and what it carries. Publishing
// holds the AMQP properties, headers and body; a zero DeliveryMode is sent
// as persistent.
type Message struct {
	Exchange   string
	RoutingKey string
	// NotMandatory publishes without the mandatory flag. It is for direct
	// reply-to, whose pseudo-queue the broker reports as unroutable even
	// when it delivers; every other publish must be mandatory.
	NotMandatory bool
	amqp.Publishing
}

// PublisherOptions configures a Publisher.
type PublisherOptions struct {
	// Window is how many publishes may await their confirm at once; a
	// publish beyond it waits for a slot. Default 256.
	Window int
	// CloseTimeout bounds how long Close waits for outstanding confirms.
	// Default 5s.
	CloseTimeout time.Duration
	// Log receives lifecycle events; nil discards them.
	Log *slog.Logger
}

// PublisherStats are running totals since OpenPublisher.
type PublisherStats struct {
	Published     int64 // publishes written to a channel
	Confirmed     int64 // confirmed and routed
	Unroutable    int64
	Nacked        int64
	Indeterminate int64 // failed because the channel or connection closed first
	Channels      int64 // channels opened (1 + reopenings)
	InFlight      int   // awaiting a confirm now
}

// Publisher publishes with confirms and the mandatory flag on one channel of
// its Conn, reopening the channel whenever it closes (a connection loss, a
// publish to a missing exchange). A publish succeeds only when the broker has
// confirmed it and routed it to at least one queue.
//
// Give publishers a Conn that no Consumer uses: the broker blocks publishing
// connections under a resource alarm, and a consumer sharing one could not
// acknowledge either. A Publisher is safe for concurrent use.
type Publisher struct {
	conn   *Conn
	log    *slog.Logger
	opts   PublisherOptions
	slots  chan struct{} // one token per publish awaiting its confirm
	closed atomic.Bool

	mu    sync.Mutex
	gen   *pubGen       // nil while no channel is open
	ready chan struct{} // closed while gen != nil
	ring  ring

	closing chan struct{}
	done    chan struct{}
	once    sync.Once

	published, confirmed, unroutable, nacked, indeterminate, channels atomic.Int64
}

type pubGen struct {
	ch   *amqp.Channel
	dead chan struct{} // closed when the channel's confirm loop has ended
}

// OpenPublisher opens a publishing channel in confirm mode on conn, waiting
// for the connection if it is reconnecting, and returns when the channel is
// ready or ctx ends. The caller closes the Publisher; the Conn stays open.
func OpenPublisher(ctx context.Context, conn *Conn, opts PublisherOptions) (*Publisher, error) {
	if opts.Window <= 0 {
		opts.Window = 256
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{
		conn:    conn,
		log:     opts.Log.With("connection", conn.Name()),
		opts:    opts,
		slots:   make(chan struct{}, opts.Window),
		ready:   make(chan struct{}),
		ring:    newRing(opts.Window),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	g, err := p.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("open publisher: %w", err)
	}
	go p.supervise(g)
	return p, nil
}

// Publish publishes msg and waits for the outcome: nil only when the broker
// confirmed the message and routed it to a queue; otherwise an
// *UnroutableError, a *NackError, or an *IndeterminateError (also when ctx
// ends first).
func (p *Publisher) Publish(ctx context.Context, msg Message) error {
	pd, err := p.PublishAsync(ctx, msg)
	if err != nil {
		return err
	}
	return pd.Wait(ctx)
}

// Pending is a publish awaiting its confirm.
type Pending struct {
	done                        chan struct{}
	err                         error
	exchange, routingKey, msgID string
}

// Done is closed when the outcome is known.
func (pd *Pending) Done() <-chan struct{} { return pd.done }

// Err returns the outcome once Done is closed (see Publisher.Publish).
func (pd *Pending) Err() error {
	<-pd.done
	return pd.err
}

// Wait waits for the outcome (see Publisher.Publish). When ctx ends first it
// returns an *IndeterminateError wrapping the context's error; the publish
// itself carries on.
func (pd *Pending) Wait(ctx context.Context) error {
	select {
	case <-pd.done:
		return pd.err
	case <-ctx.Done():
		return &IndeterminateError{Exchange: pd.exchange, RoutingKey: pd.routingKey, MessageID: pd.msgID, Err: ctx.Err()}
	}
}

// PublishAsync writes msg to the broker and returns without waiting for the
// confirm, so a caller keeps many publishes in flight. It waits only for a
// free slot in the window and for an open channel. An error means nothing was
// published: ctx ended, the Publisher is closed, or the message cannot be
// encoded (a header value of a type AMQP cannot carry).
func (p *Publisher) PublishAsync(ctx context.Context, msg Message) (*Pending, error) {
	pd := &Pending{done: make(chan struct{}), exchange: msg.Exchange, routingKey: msg.RoutingKey, msgID: msg.MessageId}
	if err := p.publish(ctx, &msg, pd, nil); err != nil {
		return nil, err
	}
	return pd, nil
}

// PublishFunc is PublishAsync with a callback instead of a Pending: done is
// called exactly once with the outcome (see Publisher.Publish), from the
// Publisher's confirm goroutine, so it must not block and must not publish
// on the same Publisher (that could wait for a slot only this goroutine
// frees); acknowledging a Delivery there is the intended use. When PublishFunc returns an error,
// nothing was published and done is never called.
func (p *Publisher) PublishFunc(ctx context.Context, msg Message, done func(error)) error {
	return p.publish(ctx, &msg, nil, done)
}

func (p *Publisher) publish(ctx context.Context, msg *Message, pd *Pending, fn func(error)) (err error) {
	if p.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case p.slots <- struct{}{}:
	default:
		if err := p.await(ctx, nil, p.slots); err != nil {
			return err
		}
	}
	// From here the publish holds a slot; it gives it back unless the
	// message was written (then the confirm gives it back).
	defer func() {
		if err != nil {
			<-p.slots
		}
	}()
	if msg.DeliveryMode == 0 {
		msg.DeliveryMode = amqp.Persistent
	}
	for {
		if err := p.conn.waitUnblocked(ctx); err != nil {
			return err
		}
		p.mu.Lock()
		if p.closed.Load() {
			p.mu.Unlock()
			return ErrClosed
		}
		g := p.gen
		if g == nil {
			ready := p.ready
			p.mu.Unlock()
			if err := p.await(ctx, ready, nil); err != nil {
				return err
			}
			continue
		}
		// The ring append happens under the same lock as the write, so the
		// confirm loop never sees a confirm before its entry.
		dc, err := g.ch.PublishWithDeferredConfirm(msg.Exchange, msg.RoutingKey, !msg.NotMandatory, false, msg.Publishing)
		if err != nil && msg.Headers.Validate() != nil {
			// Refused before anything was written (a header of a type AMQP
			// cannot carry): the message itself is wrong. Checked only
			// here, off the path of every publish.
			p.mu.Unlock()
			return fmt.Errorf("publish message %q to %s: %w", msg.MessageId, exchangeName(msg.Exchange), err)
		}
		if err != nil || dc == nil {
			p.mu.Unlock()
			// Nothing reached the broker: the channel is closed or closing
			// (amqp091-go marks the connection closed before its channels,
			// so IsClosed may still say no). Wait for the next channel and
			// write it there.
			if err := p.await(ctx, g.dead, nil); err != nil {
				return err
			}
			continue
		}
		p.ring.push(entry{
			tag: dc.DeliveryTag, exchange: msg.Exchange, key: msg.RoutingKey, msgID: msg.MessageId,
			pd: pd, fn: fn,
		})
		p.mu.Unlock()
		p.published.Add(1)
		return nil
	}
}

// await waits until done is closed or a slot is taken on slots (whichever
// is given), and returns ctx's error or ErrClosed when ctx ends or the
// Publisher closes first.
func (p *Publisher) await(ctx context.Context, done <-chan struct{}, slots chan<- struct{}) error {
	select {
	case <-done:
		return nil
	case slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.closing:
		return ErrClosed
	}
}

// Stats returns running totals.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{
		Published:     p.published.Load(),
		Confirmed:     p.confirmed.Load(),
		Unroutable:    p.unroutable.Load(),
		Nacked:        p.nacked.Load(),
		Indeterminate: p.indeterminate.Load(),
		Channels:      p.channels.Load(),
		InFlight:      len(p.slots),
	}
}

// Close stops accepting publishes, waits up to CloseTimeout for the
// outstanding confirms, fails the rest as indeterminate and closes the
// channel. It is idempotent and leaves the Conn open.
func (p *Publisher) Close() error {
	p.once.Do(func() {
		p.closed.Store(true)
		// Holding every slot means no publish awaits a confirm.
		t := time.NewTimer(p.opts.CloseTimeout)
		defer t.Stop()
	wait:
		for range p.opts.Window {
			select {
			case p.slots <- struct{}{}:
			case <-t.C:
				break wait
			}
		}
		p.mu.Lock()
		close(p.closing)
		g := p.gen
		p.mu.Unlock()
		if g != nil {
			_ = p.conn.call(context.Background(), "close publishing channel", g.ch.Close)
		}
		<-p.done
	})
	return nil
}

// open opens a channel in confirm mode and makes it current.
func (p *Publisher) open(ctx context.Context) (*pubGen, error) {
	ch, err := p.conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.conn.call(ctx, "confirm.select", func() error { return ch.Confirm(false) }); err != nil {
		_ = ch.Close()
		return nil, err
	}
	g := &pubGen{ch: ch, dead: make(chan struct{})}
	p.channels.Add(1)
	return g, nil
}

func (p *Publisher) supervise(g *pubGen) {
	defer close(p.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-p.closing
		cancel()
	}()
	for failures := 0; ; {
		p.run(g)
		if isClosed(p.closing) {
			return
		}
		for {
			var err error
			g, err = p.open(ctx)
			if err == nil {
				break
			}
			if errors.Is(err, ErrClosed) || ctx.Err() != nil {
				return
			}
			d := backoff(failures, p.conn.opts.BackoffMin, p.conn.opts.BackoffMax)
			failures++
			p.log.Warn("publishing channel reopen failed", "error", err, "duration", d)
			if !sleepCtx(ctx, d) {
				return
			}
		}
		failures = 0
		p.log.Info("publishing channel reopened")
	}
}

// run makes g current and settles its confirms and returns until the channel
// closes, then fails what is still pending as indeterminate.
func (p *Publisher) run(g *pubGen) {
	// Buffered beyond the window and drained until closed: the library drops
	// a notification it cannot deliver within 5s, and blocks its reader
	// meanwhile.
	confirms := g.ch.NotifyPublish(make(chan amqp.Confirmation, p.opts.Window+1))
	returns := g.ch.NotifyReturn(make(chan amqp.Return, p.opts.Window+1))
	closes := g.ch.NotifyClose(make(chan *amqp.Error, 1))

	p.mu.Lock()
	if isClosed(p.closing) {
		// Close ran while this channel was opening and cannot see it.
		p.mu.Unlock()
		_ = p.conn.call(context.Background(), "close publishing channel", g.ch.Close)
		close(g.dead)
		return
	}
	p.gen = g
	close(p.ready)
	p.mu.Unlock()

	for confirms != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			p.onReturn(&r)
		case c, ok := <-confirms:
			if !ok {
				confirms = nil
				continue
			}
			// The broker sends basic.return before the basic.ack of the same
			// message, and the library queues them in that order: a return
			// for this confirm is already buffered.
			returns = p.drainReturns(returns)
			p.onConfirm(c)
		}
	}

	var cause error = ErrClosed
	select {
	case e, ok := <-closes:
		if ok && e != nil {
			cause = e
		}
	default:
	}
	p.mu.Lock()
	p.gen = nil
	p.ready = make(chan struct{})
	close(g.dead)
	left := p.ring.takeAll()
	p.mu.Unlock()
	if len(left) > 0 || !errors.Is(cause, ErrClosed) {
		p.log.Warn("publishing channel closed", "error", cause, "in_flight", len(left))
	}
	for i := range left {
		e := &left[i]
		p.indeterminate.Add(1)
		p.complete(e, &IndeterminateError{Exchange: e.exchange, RoutingKey: e.key, MessageID: e.msgID, Err: cause})
	}
}

func (p *Publisher) drainReturns(returns chan amqp.Return) chan amqp.Return {
	for returns != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				return nil
			}
			p.onReturn(&r)
		default:
			return returns
		}
	}
	return nil
}

// onReturn marks the pending publishes the return belongs to. A return
// carries no delivery tag, so it is matched by message id, exchange and
// routing key; when several unconfirmed publishes match, all are marked, so
// a returned message is never reported as routed.
func (p *Publisher) onReturn(r *amqp.Return) {
	p.mu.Lock()
	n := p.ring.markReturned(r)
	p.mu.Unlock()
	if n == 0 {
		p.log.Warn("return matched no pending publish", "exchange", r.Exchange, "routing_key", r.RoutingKey, "message_id", r.MessageId)
	}
}

func (p *Publisher) onConfirm(c amqp.Confirmation) {
	p.mu.Lock()
	e, ok := p.ring.pop(c.DeliveryTag)
	p.mu.Unlock()
	if !ok {
		return
	}
	var err error
	switch {
	case !c.Ack:
		p.nacked.Add(1)
		err = &NackError{Exchange: e.exchange, RoutingKey: e.key, MessageID: e.msgID}
	case e.returned:
		p.unroutable.Add(1)
		err = &UnroutableError{Exchange: e.exchange, RoutingKey: e.key, MessageID: e.msgID, Code: int(e.retCode), Reason: e.retText}
	default:
		p.confirmed.Add(1)
	}
	p.complete(&e, err)
}

func (p *Publisher) complete(e *entry, err error) {
	<-p.slots
	if e.fn != nil {
		e.fn(err)
		return
	}
	e.pd.err = err
	close(e.pd.done)
}

// entry is one publish awaiting its confirm.
type entry struct {
	tag                  uint64
	exchange, key, msgID string
	returned             bool
	retCode              uint16
	retText              string
	pd                   *Pending
	fn                   func(error)
}

// ring is a FIFO of entries in delivery-tag order; confirms arrive in the
// same order (amqp091-go resequences them).
type ring struct {
	buf  []entry
	head int
	n    int
}

func newRing(size int) ring { return ring{buf: make([]entry, size)} }

func (r *ring) push(e entry) {
	if r.n == len(r.buf) {
		// Cannot happen while the window bounds the entries; grow anyway
		// rather than lose one.
		nb := make([]entry, 2*len(r.buf))
		for i := range r.n {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = e
	r.n++
}

// pop removes and returns the entry with tag, dropping older entries, which
// cannot exist when the broker confirms in order.
func (r *ring) pop(tag uint64) (entry, bool) {
	for r.n > 0 {
		e := r.buf[r.head]
		if e.tag > tag {
			return entry{}, false
		}
		r.buf[r.head] = entry{}
		r.head = (r.head + 1) % len(r.buf)
		r.n--
		if e.tag == tag {
			return e, true
		}
	}
	return entry{}, false
}

func (r *ring) markReturned(ret *amqp.Return) int {
	n := 0
	for i := range r.n {
		e := &r.buf[(r.head+i)%len(r.buf)]
		if !e.returned && e.msgID == ret.MessageId && e.exchange == ret.Exchange && e.key == ret.RoutingKey {
			e.returned, e.retCode, e.retText = true, ret.ReplyCode, ret.ReplyText
			n++
		}
	}
	return n
}

func (r *ring) takeAll() []entry {
	out := make([]entry, r.n)
	for i := range r.n {
		j := (r.head + i) % len(r.buf)
		out[i] = r.buf[j]
		r.buf[j] = entry{}
	}
	r.head, r.n = 0, 0
	return out
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sleepCtx waits d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
