package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

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
	// ConfirmTimeout is how long the oldest publish may wait for its
	// confirm while the connection is not blocked; past it the channel is
	// closed and reopened, and every publish awaiting a confirm on it fails
	// as indeterminate (its sender publishes it again). RabbitMQ before 4.2
	// can leave a quorum queue's publishes unconfirmed for good after a
	// node's disconnection (rabbitmq-server#14589), which would otherwise
	// hold the window's slots, and the handlers waiting on them, forever.
	// Default 30s.
	ConfirmTimeout time.Duration
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
	Stalls        int64 // channels closed for a confirm past ConfirmTimeout
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
	seq   int64 // the last value of publishSeqHeader

	closing chan struct{}
	done    chan struct{}
	once    sync.Once

	published, confirmed, unroutable, nacked, indeterminate, channels, stalls atomic.Int64
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
	if opts.ConfirmTimeout <= 0 {
		opts.ConfirmTimeout = 30 * time.Second
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
// *UnroutableError, a *NackError, an *IndeterminateError (also when ctx ends
// first), or an *InvalidMessageError when AMQP cannot carry msg.
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
// published: ctx ended, the Publisher or its Conn is closed (ErrClosed), or
// the message cannot be encoded (*InvalidMessageError).
func (p *Publisher) PublishAsync(ctx context.Context, msg Message) (*Pending, error) {
	pd := &Pending{done: make(chan struct{}), exchange: msg.Exchange, routingKey: msg.RoutingKey, msgID: msg.MessageId}
	if err := p.publish(ctx, &msg, pd, nil); err != nil {
		return nil, err
	}
	return pd, nil
}

// PublishFunc is PublishAsync with a callback instead of a Pending: done is
// called exactly once with the outcome (see Publisher.Publish), from the
// Publisher's confirm goroutine (or from Close, for the publishes it stops
// waiting for), so it must not block and must not publish on the same
// Publisher (that could wait for a slot only this goroutine frees);
// acknowledging a Delivery there is the intended use. When PublishFunc
// returns an error, nothing was published and done is never called.
func (p *Publisher) PublishFunc(ctx context.Context, msg Message, done func(error)) error {
	return p.publish(ctx, &msg, nil, done)
}

func (p *Publisher) publish(ctx context.Context, msg *Message, pd *Pending, fn func(error)) (err error) {
	if p.closed.Load() {
		return ErrClosed
	}
	// amqp091-go shuts the whole connection down when it cannot encode a
	// frame, failing every publish in flight on it: refuse such a message
	// here, before it takes a slot.
	if err := validate(msg); err != nil {
		return err
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
	headers := msg.Headers // the caller's table: never modified
	id := retKey{msgID: msg.MessageId, exchange: msg.Exchange, key: msg.RoutingKey}
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
		// A return names no delivery tag: a publish whose twin (same message
		// id, exchange and routing key) awaits its confirm carries a stamp
		// to be told apart by. A stamp the caller's headers bring along (a
		// message passed on as received) is not ours and is dropped.
		var seq int64
		msg.Headers = headers
		if !msg.NotMandatory && p.ring.pending(id) {
			p.seq++
			seq = p.seq
			msg.Headers = withHeader(headers, publishSeqHeader, seq)
		} else if _, ok := headers[publishSeqHeader]; ok {
			msg.Headers = withHeader(headers, publishSeqHeader, nil)
		}
		// The ring append happens under the same lock as the write, so the
		// confirm loop never sees a confirm before its entry.
		dc, err := g.ch.PublishWithDeferredConfirm(msg.Exchange, msg.RoutingKey, !msg.NotMandatory, false, msg.Publishing)
		if err != nil {
			if ierr := invalidHeaders(msg); ierr != nil {
				p.mu.Unlock()
				return ierr
			}
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
			seq: seq, mandatory: !msg.NotMandatory, pd: pd, fn: fn,
		})
		p.mu.Unlock()
		p.published.Add(1)
		return nil
	}
}

// await waits until done is closed or a slot is taken on slots (whichever
// is given), and returns ctx's error or ErrClosed when ctx ends or the
// Publisher or its Conn closes first. A closed Conn never gives the
// Publisher another channel, and a publish without a deadline would wait
// for one for ever.
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
	case <-p.conn.closing:
		return fmt.Errorf("publishing connection %q: %w", p.conn.Name(), ErrClosed)
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
		Stalls:        p.stalls.Load(),
		Channels:      p.channels.Load(),
		InFlight:      len(p.slots),
	}
}

// Close stops accepting publishes, waits up to CloseTimeout for the
// outstanding confirms, fails the rest as indeterminate and closes the
// channel. It returns within CloseTimeout and twice the Conn's OpTimeout,
// even when the broker reads nothing (a resource alarm): the channel is then
// left to close with the connection. It is idempotent and leaves the Conn
// open.
func (p *Publisher) Close() error {
	p.once.Do(func() {
		start := time.Now()
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
		// A broker that reads nothing sends neither the confirms nor the
		// close-ok, and the confirm goroutine waits for the connection to
		// die. Fail what it still holds instead of waiting with it: under
		// p.mu, so it finds the ring empty when it ends and no callback
		// runs twice.
		wait := time.NewTimer(p.conn.opts.OpTimeout)
		defer wait.Stop()
		select {
		case <-p.done:
		case <-wait.C:
			p.mu.Lock()
			left := p.ring.takeAll()
			p.mu.Unlock()
			p.log.Warn("publishing channel did not close; failing the publishes in flight", "in_flight", len(left), "duration", time.Since(start).Round(time.Millisecond))
			p.fail(left, fmt.Errorf("publishing channel on connection %q did not close within %s (is the broker blocking the connection?): %w", p.conn.Name(), p.conn.opts.OpTimeout, ErrClosed))
		}
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

	stall := confirmWatch{timeout: p.opts.ConfirmTimeout}
	tick := time.NewTicker(stall.every())
	defer tick.Stop()
	for confirms != nil {
		select {
		case now := <-tick.C:
			p.mu.Lock()
			oldest, waiting := p.ring.oldest()
			p.mu.Unlock()
			if stalled, lasted := stall.check(oldest, waiting, p.conn.Blocked(), now); stalled {
				p.stalls.Add(1)
				p.log.Warn("no confirm from the broker; closing the publishing channel to publish its messages again on another",
					"exchange", oldest.exchange, "routing_key", oldest.key, "message_id", oldest.msgID,
					"waited", lasted.Round(time.Millisecond), "confirm_timeout", p.opts.ConfirmTimeout)
				// The close's answer need not be awaited: the library
				// closes confirms at once, which ends this loop.
				go func() { _ = g.ch.Close() }()
			}
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
	p.fail(left, cause)
}

// fail completes entries taken from the ring as indeterminate, with cause.
func (p *Publisher) fail(left []entry, cause error) {
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

// onReturn marks the pending publish the return belongs to (see
// ring.markReturned).
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

// publishSeqHeader is a header the Publisher adds to a mandatory publish
// only when another publish with the same message id, exchange and routing
// key awaits its confirm: its value (int64) is a sequence number of the
// Publisher, by which the broker's basic.return, which carries the message
// but no delivery tag, names the one publish it belongs to. Every other
// publish goes without it, and the Publisher removes it from the headers a
// caller passes in. Consumers see it on such messages and may ignore it.
const publishSeqHeader = "x-acemq-publish-seq"

// withHeader returns a copy of t with key set to v, or removed when v is nil.
func withHeader(t amqp.Table, key string, v any) amqp.Table {
	out := make(amqp.Table, len(t)+1)
	for k, x := range t {
		out[k] = x
	}
	if v == nil {
		delete(out, key)
	} else {
		out[key] = v
	}
	return out
}

// entry is one publish awaiting its confirm.
type entry struct {
	tag                  uint64
	exchange, key, msgID string
	seq                  int64 // publishSeqHeader's value; 0 when not stamped
	mandatory            bool  // only a mandatory publish can be returned
	returned             bool
	retCode              uint16
	retText              string
	pd                   *Pending
	fn                   func(error)
}

// retKey is what a basic.return says of the publish it belongs to.
type retKey struct{ msgID, exchange, key string }

func (e *entry) retKey() retKey { return retKey{msgID: e.msgID, exchange: e.exchange, key: e.key} }

// ring is a FIFO of entries in delivery-tag order; confirms arrive in the
// same order (amqp091-go resequences them).
type ring struct {
	buf  []entry
	head int
	n    int
	// keys counts the mandatory entries per retKey. Because a publish is
	// stamped whenever its key is already counted, at most one entry per
	// key is unstamped.
	keys map[retKey]int
}

func newRing(size int) ring { return ring{buf: make([]entry, size), keys: make(map[retKey]int)} }

// pending reports whether a mandatory entry with key k awaits its confirm.
func (r *ring) pending(k retKey) bool { return r.keys[k] > 0 }

func (r *ring) forget(e *entry) {
	if !e.mandatory {
		return
	}
	k := e.retKey()
	if r.keys[k] <= 1 {
		delete(r.keys, k)
		return
	}
	r.keys[k]--
}

func (r *ring) push(e entry) {
	if e.mandatory {
		r.keys[e.retKey()]++
	}
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
		r.forget(&e)
		if e.tag == tag {
			return e, true
		}
	}
	return entry{}, false
}

// markReturned marks the entry ret belongs to and returns how many entries
// it marked. A return with publishSeqHeader belongs to the entry with that
// stamp; one without belongs to the only unstamped entry with its message
// id, exchange and routing key. Should neither be found, every unmarked
// entry with that message id, exchange and routing key is marked, so that
// a returned message is never reported as routed.
func (r *ring) markReturned(ret *amqp.Return) int {
	seq, _ := ret.Headers[publishSeqHeader].(int64)
	k := retKey{msgID: ret.MessageId, exchange: ret.Exchange, key: ret.RoutingKey}
	mark := func(e *entry) { e.returned, e.retCode, e.retText = true, ret.ReplyCode, ret.ReplyText }
	for i := range r.n {
		e := &r.buf[(r.head+i)%len(r.buf)]
		if e.mandatory && !e.returned && e.seq == seq && e.retKey() == k {
			mark(e)
			return 1
		}
	}
	n := 0
	for i := range r.n {
		e := &r.buf[(r.head+i)%len(r.buf)]
		if e.mandatory && !e.returned && e.retKey() == k {
			mark(e)
			n++
		}
	}
	return n
}

// oldest returns the entry that has waited longest for its confirm.
func (r *ring) oldest() (entry, bool) {
	if r.n == 0 {
		return entry{}, false
	}
	return r.buf[r.head], true
}

// confirmWatch tells a publishing channel whose oldest publish has waited
// longer than timeout for its confirm: checked every tick, it remembers the
// oldest delivery tag and since when it has seen it the oldest (a blocked
// connection, whose publishes the broker does not read, restarts the wait).
type confirmWatch struct {
	timeout time.Duration
	tag     uint64
	since   time.Time
}

func (w *confirmWatch) every() time.Duration { return max(w.timeout/4, 10*time.Millisecond) }

func (w *confirmWatch) check(oldest entry, waiting, blocked bool, now time.Time) (stalled bool, lasted time.Duration) {
	if !waiting || blocked || oldest.tag != w.tag {
		w.tag, w.since = oldest.tag, now
		if !waiting || blocked {
			w.tag = 0
		}
		return false, 0
	}
	lasted = now.Sub(w.since)
	return lasted >= w.timeout, lasted
}

func (r *ring) takeAll() []entry {
	out := make([]entry, r.n)
	for i := range r.n {
		j := (r.head + i) % len(r.buf)
		out[i] = r.buf[j]
		r.buf[j] = entry{}
	}
	r.head, r.n = 0, 0
	clear(r.keys)
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

// ErrInvalidMessage matches *InvalidMessageError.
var ErrInvalidMessage = errors.New("message cannot be encoded in AMQP")

// InvalidMessageError reports a publish refused before anything was sent
// because AMQP cannot carry the message: a short string longer than 255
// bytes (the exchange, the routing key, MessageId, CorrelationId, ReplyTo,
// Type, AppId, UserId, ContentType, ContentEncoding, Expiration, or a header
// key at any depth), or a header value of a type AMQP has no encoding for.
// The message would fail the same way every time: do not publish it again
// as it is; dead-letter it or correct it. It takes no window slot and is not
// counted in PublisherStats.
type InvalidMessageError struct {
	Exchange   string
	RoutingKey string
	MessageID  string
	// Field names what is wrong: "exchange", "routing key", a property by
	// its amqp.Publishing name ("MessageId"), a header key with where it
	// sits (`header key "k" inside header "outer"[1]`), or "headers" for a
	// value of an unsupported type.
	Field string
	// Len is the field's length in bytes; 0 when a value's type is wrong.
	Len int
	// Err is amqp091-go's complaint about a header value; nil for a length.
	Err error
}

// Error describes the failure; see the type's comment.
func (e *InvalidMessageError) Error() string {
	head := fmt.Sprintf("message %q to %s with routing key %q cannot be published",
		clip(e.MessageID), exchangeName(clip(e.Exchange)), clip(e.RoutingKey))
	if e.Err != nil && e.Field == "Expiration" {
		return fmt.Sprintf("%s: Expiration %v; give it in milliseconds, such as \"60000\"", head, e.Err)
	}
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v; give header values a type AMQP carries (string, integer, float, bool, []byte, time.Time, amqp.Decimal, amqp.Table, []any or nil)",
			head, e.Field, e.Err)
	}
	return fmt.Sprintf("%s: %s is %d bytes long, over the AMQP limit of %d bytes; shorten it", head, e.Field, e.Len, shortstrMax)
}

// Is reports whether target is ErrInvalidMessage.
func (e *InvalidMessageError) Is(target error) bool { return target == ErrInvalidMessage }

// Unwrap returns amqp091-go's error, if any.
func (e *InvalidMessageError) Unwrap() error { return e.Err }

// shortstrMax is the length limit, in bytes, of an AMQP short string.
const shortstrMax = 255

// digitsOnly reports whether s is empty or only ASCII digits.
func digitsOnly(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// validate returns an *InvalidMessageError when amqp091-go could not encode
// m. It allocates nothing for a valid message.
func validate(m *Message) error {
	invalid := func(field string, n int, err error) error {
		return &InvalidMessageError{Exchange: m.Exchange, RoutingKey: m.RoutingKey, MessageID: m.MessageId, Field: field, Len: n, Err: err}
	}
	short := [...]struct{ name, v string }{
		{"exchange", m.Exchange},
		{"routing key", m.RoutingKey},
		{"MessageId", m.MessageId},
		{"CorrelationId", m.CorrelationId},
		{"ReplyTo", m.ReplyTo},
		{"Type", m.Type},
		{"AppId", m.AppId},
		{"UserId", m.UserId},
		{"ContentType", m.ContentType},
		{"ContentEncoding", m.ContentEncoding},
		{"Expiration", m.Expiration},
	}
	for _, f := range short {
		if len(f.v) > shortstrMax {
			return invalid(f.name, len(f.v), nil)
		}
	}
	// RabbitMQ closes the channel (406) on an expiration that is not a
	// whole number of milliseconds, failing every publish in flight on it.
	if !digitsOnly(m.Expiration) {
		return invalid("Expiration", 0, fmt.Errorf("%q is not a whole number of milliseconds", clip(m.Expiration)))
	}
	if len(m.Headers) == 0 {
		return nil
	}
	if key, n, where := longKey(m.Headers); n > 0 {
		field := fmt.Sprintf("header key %q", clip(key))
		if where != "" {
			field += " inside header " + where
		}
		return invalid(field, n, nil)
	}
	// Header value types are checked by amqp091-go itself, before it
	// writes anything: publish reads its refusal (invalidHeaders).
	return nil
}

// invalidHeaders is the *InvalidMessageError for a publish amqp091-go
// refused, before writing anything, for a header value of a type AMQP
// cannot carry; nil when that is not why it failed.
func invalidHeaders(m *Message) error {
	if err := m.Headers.Validate(); err != nil {
		return &InvalidMessageError{Exchange: m.Exchange, RoutingKey: m.RoutingKey, MessageID: m.MessageId, Field: "headers", Err: err}
	}
	return nil
}

// longKey finds a key longer than a short string in v, a header value, at
// any depth. It returns the key, its length (0 when there is none) and
// where its table sits below v: "" for v itself, `"outer"`, `"list"[1]`,
// `"a"."b"`.
func longKey(v any) (key string, n int, where string) {
	switch v := v.(type) {
	case amqp.Table:
		for k, x := range v {
			if len(k) > shortstrMax {
				return k, len(k), ""
			}
			if key, n, where := longKey(x); n > 0 {
				if where != "" && where[0] != '[' {
					where = "." + where
				}
				return key, n, fmt.Sprintf("%q", k) + where
			}
		}
	case []any:
		for i, x := range v {
			if key, n, where := longKey(x); n > 0 {
				return key, n, fmt.Sprintf("[%d]", i) + where
			}
		}
	}
	return "", 0, ""
}

// clip shortens s for an error message to its first 40 bytes and "…".
func clip(s string) string {
	const keep = 40
	if len(s) <= keep {
		return s
	}
	i := keep
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
