package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/internal/work"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/stores"
)

// Group states.
const (
	StateStopped  = "stopped"
	StateRunning  = "running"
	StateStopping = "stopping"
)

// ErrGroupSize is returned when scaling a group below one consumer.
var ErrGroupSize = errors.New("a group needs at least one consumer")

// ErrOutOfRange is returned for a prefetch outside 1 to MaxPrefetch.
var ErrOutOfRange = errors.New("out of range")

// MaxPrefetch is the largest prefetch a consumer group's broker consumer
// takes: basic.qos counts unacknowledged messages in 16 bits.
const MaxPrefetch = broker.MaxPrefetch

// group is one consumer group (listeners.txt, "Every listener is a group,
// even at concurrency one"): a queue, a handler, size consumers (handlers
// at once, on one broker subscription of size × prefetch, on a channel of
// its own), and counters.
type group struct {
	r    *Runtime
	c    *plan.Consumer
	log  *slog.Logger
	call func(ctx context.Context, req Request) (decide.Result, error)
	tmo  time.Duration
	step stepFunc // the delivery's way from inbound message to decision
	// publisher is what a message to exchange is published with
	// (Runtime.publisherFor; a fake in the tests).
	publisher func(exchange string) publisher
	gate      *claimGate // nil unless the consumer is idempotent
	route     []string   // the pipeline's declared route, for steps
	saga      *sagaCall  // nil unless the consumer serves a saga
	uses      []string   // the stores whose outage pauses the group (infra.go)

	counts   map[string]*atomic.Int64
	inflight atomic.Int64
	// Progress, for Stalls (stall.go): when in-flight last went from none
	// to some (busy) and when a delivery was last finished (done), in
	// nanoseconds since epoch; stallAfter is how long it may hold
	// deliveries and finish none before it is stalled.
	busy, done atomic.Int64
	stallAfter time.Duration
	// The group's metric series, looked up once rather than per message.
	mInflight prometheus.Gauge
	mDuration prometheus.Observer
	mMessages map[string]prometheus.Counter
	mDead     prometheus.Counter
	bg        work.Work // follow-up work started from confirm callbacks

	mu       sync.Mutex // guards the fields below; held across start/stop/scale
	state    string
	size     int
	prefetch int
	// view is state, size and prefetch as last set, for status readers:
	// they must not wait behind g.mu, which a stop, scale or prefetch
	// change holds while the group drains.
	view     atomic.Pointer[groupView]
	member   *member // nil unless running
	prepared bool    // its queues are declared and checked
}

// groupView is what a status reader sees of a group's settings.
type groupView struct {
	state          string
	size, prefetch int
}

// show publishes state, size and prefetch to status readers; the caller
// holds g.mu (or owns g, before it is shared).
func (g *group) show() {
	g.view.Store(&groupView{state: g.state, size: g.size, prefetch: g.prefetch})
}

// member runs a group's consumers: one broker.Consumer with one
// subscription and a handler goroutine per consumer of the group.
type member struct {
	bc     *broker.Consumer
	cancel context.CancelFunc
	done   chan struct{}
	left   int // deliveries left in flight when it drained
}

func (r *Runtime) newGroup(c *plan.Consumer) *group {
	call, tmo := r.callerFor(c)
	g := &group{r: r, c: c, call: call, tmo: tmo, route: r.routes[c.Pipeline], state: StateStopped, size: max(c.Concurrency, 1), prefetch: c.Prefetch,
		log:    r.log.With("flow", c.Flow, "consumer", c.ID, "queue", c.Queue),
		counts: map[string]*atomic.Int64{}}
	g.mInflight = r.metrics.inflight.WithLabelValues(c.ID)
	g.mDuration = r.metrics.duration.WithLabelValues(c.ID)
	g.mDead = r.metrics.deadLettered.WithLabelValues(c.Queue)
	g.mMessages = map[string]prometheus.Counter{}
	g.stallAfter = r.stallAfter(c)
	g.show()
	for _, o := range outcomes {
		g.counts[o] = &atomic.Int64{}
		g.mMessages[o] = r.metrics.messages.WithLabelValues(c.ID, o)
	}
	if c.Idempotent && r.opts.Store != nil {
		g.gate = newClaimGate(r.opts.Store, c.ID, r.opts.ClaimTimeout, r.log)
	}
	if c.Saga != "" {
		g.saga = g.newSagaCall()
	}
	g.uses = g.needs()
	g.call = g.traceCall(g.call)
	g.step = g.traceStep(g.steps())
	g.publisher = func(exchange string) publisher { return r.publisherFor(exchange) }
	if r.tracer != nil {
		g.publisher = func(exchange string) publisher { return tracedPublisher{next: r.publisherFor(exchange), t: r.tracer} }
	}
	return g
}

var outcomes = []string{decide.OutcomeAcknowledged, decide.OutcomeStopped, decide.OutcomeRetried, decide.OutcomeDeadLettered, decide.OutcomeDuplicate, decide.OutcomeInProgress, decide.OutcomeHeld, OutcomeRejected, OutcomeRepublished}

// OutcomeRejected counts deliveries handed back to the broker (requeued)
// because what they produced could not be published.
const OutcomeRejected = "rejected"

// OutcomeRepublished counts the decisions published again, their delivery
// held, because the broker nacked a publish of theirs (decide.PublishFailed).
const OutcomeRepublished = "republished"

// start starts the group's consumers. A group whose queue is missing is
// refused, naming the queue.
func (g *group) start(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == StateRunning {
		return nil
	}
	if g.r.draining() {
		// Run drains, or has returned: a consumer started now would run
		// on closed connections, with nothing to stop it.
		return fmt.Errorf("consumer %q: %w", g.c.ID, ErrShuttingDown)
	}
	if !g.prepared {
		if err := g.r.prepare(ctx, g.c); err != nil {
			return err
		}
		g.prepared = true
	}
	g.add()
	g.warnPrefetchCap(g.prefetch, g.size)
	g.state = StateRunning
	g.show()
	g.log.Info("consumer started", "prefetch", g.prefetch, "concurrency", g.size)
	return nil
}

// groupPrefetch is the prefetch of a group's one broker consumer: the
// group's prefetch for each of its size handlers, within what basic.qos
// carries.
//
// A group of N is one subscription with N handlers, not N subscriptions of
// one: to a quorum queue, N consumers that each get a message back for
// every one they settle cost far more per message than one consumer of N
// times the prefetch, whose deliveries and settlements go in batches
// (measured: a hop through a plugin at concurrency 32 ran at 0.69 of raw
// AMQP with 32 consumers, 0.95 with one).
func groupPrefetch(prefetch, size int) int {
	return min(prefetch*size, broker.MaxPrefetch)
}

// warnPrefetchCap logs when the group's broker consumer gets less than
// size × prefetch because basic.qos carries no more.
func (g *group) warnPrefetchCap(prefetch, size int) {
	if prefetch*size > broker.MaxPrefetch {
		g.log.Warn("the group's broker consumer gets less than handlers × prefetch: basic.qos carries at most max_prefetch",
			"handlers", size, "prefetch", prefetch, "wanted", prefetch*size, "max_prefetch", broker.MaxPrefetch)
	}
}

// add starts the group's member; the caller holds g.mu.
func (g *group) add() {
	// The member's context ends when the group removes it, or when Run
	// drains: every member is told at once, and drains beside the others.
	ctx, cancel := context.WithCancel(context.Background())
	g.r.wg.Go(func() {
		select {
		case <-g.r.stopping:
			cancel()
		case <-ctx.Done():
		}
	})
	m := &member{cancel: cancel, done: make(chan struct{}),
		bc: broker.NewConsumer(g.r.consume, broker.ConsumerOptions{Queue: g.c.Queue, Tag: g.c.ID, Prefetch: groupPrefetch(g.prefetch, g.size),
			Subscriptions: 1, Concurrency: g.size, DrainTimeout: g.r.opts.DrainTimeout, Log: g.r.log.With("flow", g.c.Flow, "consumer", g.c.ID)})}
	g.member = m
	g.r.wg.Go(func() {
		defer close(m.done)
		err := m.bc.Run(ctx, g.handle)
		var de *broker.DrainError
		switch {
		case errors.As(err, &de):
			m.left = de.Left
		case err != nil && !errors.Is(err, broker.ErrClosed):
			g.log.Error("consumer stopped", "error", err)
		}
	})
}

// remove drains and stops the member, blocking until it has drained; the
// caller holds g.mu. It returns the deliveries left in flight.
func (g *group) remove() int {
	m := g.member
	if m == nil {
		return 0
	}
	g.member = nil
	m.cancel()
	<-m.done
	return m.left
}

// stop drains the group (as shutdown does) and stops it.
func (g *group) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != StateRunning {
		return
	}
	g.state = StateStopping
	g.show()
	left := g.remove()
	g.bg.Wait()
	g.state = StateStopped
	g.show()
	// Its queue is checked again when it starts: it may be gone by then.
	g.prepared = false
	g.reportDrain(left)
}

// reportDrain logs the drain's result, naming what was left.
func (g *group) reportDrain(left int) {
	if left > 0 {
		g.log.Warn("consumer drained with messages still in flight after the drain timeout; they will be redelivered",
			"left_for_redelivery", left, "drain_timeout", g.r.opts.DrainTimeout)
		return
	}
	g.log.Info("consumer drained")
}

// shutdown waits for the member stopped by the runtime's context and reports.
func (g *group) shutdown() {
	g.mu.Lock()
	defer g.mu.Unlock()
	left := g.remove() // its context has ended already; this waits and counts
	g.bg.Wait()
	if g.state == StateRunning {
		g.reportDrain(left)
	}
	g.state = StateStopped
	g.show()
}

// scale sets the number of consumers (handlers at once). A running group
// restarts its broker consumer with the new size (see restart), so scaling
// blocks while what is in flight drains (listeners.txt, "scaling down
// blocks").
func (g *group) scale(n int) error {
	if n < 1 || n > MaxConsumers {
		return fmt.Errorf("consumer %q: %w", g.c.ID, ErrGroupSize)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.r.draining() {
		return fmt.Errorf("consumer %q: %w", g.c.ID, ErrShuttingDown)
	}
	if n == g.size {
		return nil
	}
	g.size = n
	g.show()
	if g.state == StateRunning {
		if err := g.restart(); err != nil {
			return err
		}
	}
	g.log.Info("consumer scaled", "concurrency", n)
	return nil
}

// restart drains the group's broker consumer and starts a new one with the
// group's size and prefetch, as a stop and a start would; the caller holds
// g.mu. A broker consumer's prefetch is fixed when it subscribes: a new
// one is needed, and draining the old one first keeps the group's handlers
// within its size, unless the drain timeout passes first (its handlers are
// then told to stop, and those that go on run beside the new ones; their
// messages are redelivered). What the old one had prefetched goes back to
// the queue (a quorum queue counts that as a delivery). When Run began to
// drain meanwhile, no new consumer is started.
func (g *group) restart() error {
	left := g.remove()
	if left > 0 {
		g.log.Warn("consumer restarted with messages still in flight after the drain timeout; they will be redelivered",
			"left_for_redelivery", left, "drain_timeout", g.r.opts.DrainTimeout)
	}
	if g.r.draining() {
		g.state = StateStopped
		g.prepared = false
		g.show()
		return fmt.Errorf("consumer %q: %w", g.c.ID, ErrShuttingDown)
	}
	g.add()
	g.warnPrefetchCap(g.prefetch, g.size)
	return nil
}

// setPrefetch changes the prefetch of every consumer (handler) of the
// group; a running group restarts its broker consumer with it.
func (g *group) setPrefetch(n int) error {
	if n < 1 || n > broker.MaxPrefetch {
		return fmt.Errorf("consumer %q: prefetch %d is %w; give 1 to %d", g.c.ID, n, ErrOutOfRange, MaxPrefetch)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.r.draining() {
		// A restart now would start a consumer while Run drains.
		return fmt.Errorf("consumer %q: %w", g.c.ID, ErrShuttingDown)
	}
	if n == g.prefetch {
		return nil
	}
	g.prefetch = n
	g.show()
	if g.member != nil {
		return g.restart()
	}
	return nil
}

// handle runs one delivery through the group's step (its wrappers: the
// payload checks, the claim gate, the call; see step.go), then publishes
// what the decision says and acknowledges only once every publish is
// confirmed. While a store the group uses is unavailable, it waits first
// (infra.go): the group takes nothing it could not handle.
func (g *group) handle(ctx context.Context, bd *broker.Delivery) {
	if !g.r.outages.wait(ctx, g.uses) {
		// Stopped while paused: the delivery goes back untouched.
		_ = bd.Nack(true)
		return
	}
	now := time.Now()
	g.hold(now)
	d := &delivery{in: decide.InboundOf(wire.Message(&bd.Delivery)), received: now}
	dec := g.step(ctx, d)
	g.carryOut(tracedContext(ctx, d), bd, d.in, dec, d.ticket)
}

// succeeded reports whether a decision ends the handling of a claimed
// delivery as done (to be confirmed), rather than failed (to be released).
func succeeded(dec decide.Decision) bool {
	return dec.Outcome == decide.OutcomeAcknowledged || dec.Outcome == decide.OutcomeStopped
}

// release gives up the claim of a delivery whose handling failed, so its
// retry is claimed at once; a failed release only delays that to the
// lease's end.
func (g *group) release(ctx context.Context, t *Ticket) {
	if t == nil {
		return
	}
	if err := g.gate.Release(ctx, *t); err != nil {
		g.log.Warn("claim not released; the retry waits for its lease", "error", err)
	}
}

// confirmAndSettle records a claimed delivery as handled, after its output
// was confirmed by the broker and before the acknowledgement (see
// idempotency.go for why this order), then acknowledges it.
func (g *group) confirmAndSettle(ctx context.Context, d *broker.Delivery, in decide.Inbound, dec decide.Decision, t *Ticket) {
	if t != nil {
		if err := g.gate.Confirm(ctx, *t); err != nil {
			if errors.Is(err, stores.ErrStaleClaim) {
				g.log.Warn("claim taken over before the handler finished; raise --claim-timeout above the slowest handler", "message_id", in.Env.MessageID, "error", err)
			} else {
				g.log.Warn("claim not confirmed; a duplicate within the lease will be handled again", "message_id", in.Env.MessageID, "error", err)
			}
		}
	}
	g.settle(d, in, dec)
}

func (g *group) carryOut(ctx context.Context, d *broker.Delivery, in decide.Inbound, dec decide.Decision, t *Ticket) {
	if t != nil && !succeeded(dec) {
		g.release(ctx, t)
		t = nil
	}
	c := &carried{g: g, ctx: ctx, d: d, in: in, dec: dec, t: t, own: dec.Publish}
	if slices.ContainsFunc(c.own, func(p decide.Publish) bool { return p.BestEffort }) {
		c.own = nil
		for _, p := range dec.Publish {
			if p.BestEffort {
				c.replies = append(c.replies, p)
			} else {
				c.own = append(c.own, p)
			}
		}
	}
	g.publishAll(ctx, c.own, nil, c.published)
}

// carried is a decision being carried out, for the callbacks of its
// publishes: one allocation a delivery, where closures over the same
// values took six.
type carried struct {
	g   *group
	ctx context.Context
	d   *broker.Delivery
	in  decide.Inbound
	dec decide.Decision
	t   *Ticket // the claim to confirm before the acknowledgement, if any
	// own are the decision's publishes, replies its best-effort ones.
	own, replies []decide.Publish
	// refused counts the broker's nacks of own, since refusedSince;
	// refusedLogged is set once their lasting a minute is logged.
	refused       int
	refusedSince  time.Time
	refusedLogged bool
}

// published is called once the decision's own publishes are confirmed and
// routed, or one failed. Replies go out only then: a reply tells the
// requester how the run ended, which it has not while the message may yet
// go back to its queue or elsewhere. A reply that fails is logged and holds
// nothing back: the run has ended, and the requester may be gone.
func (c *carried) published(failed error) {
	switch {
	case failed != nil:
		// Confirm callbacks must not publish; the follow-up runs on its
		// own goroutine, owned by the group.
		c.g.bg.Go(func() { c.g.publishFailed(c, failed) })
	case len(c.replies) == 0:
		c.settle()
	case len(c.own) == 0:
		c.sendReplies()
	default:
		c.g.bg.Go(c.sendReplies)
	}
}

func (c *carried) sendReplies() {
	c.g.sendReplies(c.ctx, c.in, c.replies, replyAttempts, c.settle)
}

// settle confirms the claim, if any, and acknowledges the delivery.
func (c *carried) settle() {
	if c.t != nil {
		// Not on a confirm callback: the store may block.
		c.g.bg.Go(func() { c.g.confirmAndSettle(c.ctx, c.d, c.in, c.dec, c.t) })
		return
	}
	c.g.settle(c.d, c.in, c.dec)
}

// replyAttempts is how many times a reply is published whose outcome is
// unknown (the channel closed before the broker confirmed it) before it is
// given up.
const replyAttempts = 3

// sendReplies publishes a run's replies, publishing again, up to left
// times in all, those whose outcome is unknown, then calls done. A reply
// that fails otherwise, or every time, is logged and holds nothing back:
// the run has ended, and the requester may be gone.
func (g *group) sendReplies(ctx context.Context, in decide.Inbound, replies []decide.Publish, left int, done func()) {
	var (
		mu    sync.Mutex
		again []decide.Publish
	)
	g.publishAll(ctx, replies, func(p decide.Publish, err error) {
		switch {
		case errors.Is(err, broker.ErrUnroutable):
			g.log.Warn("reply not delivered: nothing listens on reply_to any more", "message_id", in.Env.MessageID, "routing_key", p.RoutingKey)
		case errors.Is(err, broker.ErrIndeterminate) && left > 1 && ctx.Err() == nil:
			mu.Lock()
			again = append(again, p)
			mu.Unlock()
		default:
			g.log.Warn("reply not delivered", "message_id", in.Env.MessageID, "routing_key", p.RoutingKey, "error", err)
		}
	}, func(error) {
		if len(again) == 0 {
			done()
			return
		}
		// Not on the confirm callback, which must not publish.
		g.bg.Go(func() { g.sendReplies(ctx, in, again, left-1, done) })
	})
}

// publishAll publishes ps and calls done once every one is confirmed or
// failed, with the first failure; failed, when not nil, is called for each
// failure. With nothing to publish, done is called at once.
func (g *group) publishAll(ctx context.Context, ps []decide.Publish, failed func(decide.Publish, error), done func(error)) {
	if len(ps) == 0 {
		done(nil)
		return
	}
	if len(ps) == 1 && failed == nil {
		// A step's usual decision: one output, whose outcome is done's.
		p := &ps[0]
		if err := g.publisher(p.Exchange).PublishFunc(ctx, wire.Publishing(p.Message), done); err != nil {
			done(err)
		}
		return
	}
	var (
		mu      sync.Mutex
		pending = len(ps)
		first   error
	)
	for _, p := range ps {
		cb := func(err error) {
			if err != nil && failed != nil {
				failed(p, err)
			}
			mu.Lock()
			if err != nil && first == nil {
				first = err
			}
			pending--
			last := pending == 0
			mu.Unlock()
			if last {
				done(first)
			}
		}
		if err := g.publisher(p.Exchange).PublishFunc(ctx, wire.Publishing(p.Message), cb); err != nil {
			cb(err)
		}
	}
}

// hold counts a delivery handed to the group's step at now; finish counts
// it settled.
func (g *group) hold(now time.Time) {
	if g.inflight.Load() == 0 {
		// Stored before the count: a stall check that sees the delivery
		// counted sees when the group began to hold it (stall.go).
		g.busy.Store(sinceEpoch(now))
	}
	g.inflight.Add(1)
	g.mInflight.Inc()
}

// finish counts a delivery settled (acknowledged or handed back), whatever
// its outcome: the group made progress (stall.go).
func (g *group) finish() {
	g.done.Store(sinceEpoch(time.Now()))
	g.inflight.Add(-1)
	g.mInflight.Dec()
}

func (g *group) settle(d *broker.Delivery, in decide.Inbound, dec decide.Decision) {
	defer g.finish()
	if err := d.Ack(); err != nil {
		// The channel closed first: the broker requeues the delivery.
		g.log.Debug("acknowledgement dropped; the message will be redelivered", "message_id", in.Env.MessageID, "error", err)
		return
	}
	g.count(dec.Outcome)
	switch dec.Outcome {
	case decide.OutcomeRetried:
		g.log.Warn("delivery retried", "message_id", in.Env.MessageID, "attempt", in.Env.Attempt, "rung", dec.Rung, "error", dec.Reason)
	case decide.OutcomeDeadLettered:
		g.mDead.Inc()
		g.log.Warn("delivery dead-lettered", "message_id", in.Env.MessageID, "attempt", in.Env.Attempt, "error", dec.Reason)
	default:
		if g.log.Enabled(context.Background(), slog.LevelDebug) {
			g.log.Debug("delivery settled", "outcome", dec.Outcome, "message_id", in.Env.MessageID)
		}
	}
}

func (g *group) count(outcome string) {
	g.counts[outcome].Add(1)
	g.mMessages[outcome].Inc()
}

// publishFailed handles a decision whose own publish did not reach a
// queue. What the broker refused (no route, no exchange, a result AMQP
// cannot carry, a basic.nack) is decided by decide.PublishFailed: a
// decision the broker nacked is published again after a wait
// (publishAgain); otherwise the delivery is parked, dead-lettered or
// retried instead, or, when nothing
// takes it (an in-progress delivery whose rung refuses it, a message
// .parked refuses too), it goes back to its queue after holdBeforeRequeue,
// logged as an error: requeued at once, it would come straight back and
// fail the same way. Anything else (the connection lost, the runtime
// stopping) leaves the message to the broker, requeued, to be handled
// again.
func (g *group) publishFailed(c *carried, err error) {
	ctx, d, in, dec, t := c.ctx, c.d, c.in, c.dec, c.t
	if f, refused := g.refusal(ctx, err); refused {
		fb := decide.PublishFailed(g.c, in, dec, f, time.Now())
		if fb.Again {
			g.publishAgain(c, fb.Event, err)
			return
		}
		level := slog.LevelWarn
		if fb.Hold || fb.Decision.Parked {
			level = slog.LevelError
		}
		g.log.Log(ctx, level, fb.Event, "message_id", in.Env.MessageID, "outcome", dec.Outcome, "error", err)
		if !fb.Hold {
			g.carryOut(ctx, d, in, fb.Decision, t)
			return
		}
		g.release(ctx, t)
		g.bg.Go(func() {
			defer g.finish()
			wait := time.NewTimer(holdBeforeRequeue)
			defer wait.Stop()
			select {
			case <-wait.C:
			case <-ctx.Done():
			}
			if nerr := d.Nack(true); nerr == nil {
				g.count(OutcomeRejected)
			}
		})
		return
	}
	g.giveBack(c, err)
}

// giveBack leaves c's message to the broker, requeued, to be handled again:
// its publish failed in a way that decides nothing about it (the
// connection lost, the runtime stopping).
func (g *group) giveBack(c *carried, err error) {
	g.release(c.ctx, c.t)
	defer g.finish()
	g.log.Warn("publish failed; the message goes back to its queue", "message_id", c.in.Env.MessageID, "error", err)
	if nerr := c.d.Nack(true); nerr == nil {
		g.count(OutcomeRejected)
	}
}

// publishAgain publishes c's decision again once decide.RepublishBackoff
// has passed, its delivery held meanwhile (unacknowledged: nothing goes
// back to the queue, where a quorum queue would count it against its
// delivery limit) and its claim kept. The first refusal of a delivery is
// logged as a warning, one lasting a minute as an error, once; a group
// whose deliveries are all held so finishes none and shows as stalled
// (stall.go). When the runtime stops first, the message goes back to its
// queue.
func (g *group) publishAgain(c *carried, event string, err error) {
	now := time.Now()
	c.refused++
	switch {
	case c.refused == 1:
		c.refusedSince = now
		g.log.Warn(event, "message_id", c.in.Env.MessageID, "outcome", c.dec.Outcome, "error", err)
	case !c.refusedLogged && now.Sub(c.refusedSince) >= refusedErrorAfter:
		c.refusedLogged = true
		g.log.Error("the broker has refused this delivery's publish for a minute; it is held, published again every 10 s, until the broker takes it",
			"message_id", c.in.Env.MessageID, "refusals", c.refused, "since", c.refusedSince, "error", err)
	}
	wait := time.NewTimer(decide.RepublishBackoff(c.refused, rand.Float64()))
	defer wait.Stop()
	select {
	case <-wait.C:
	case <-c.ctx.Done():
		g.giveBack(c, err)
		return
	}
	g.count(OutcomeRepublished)
	g.publishAll(c.ctx, c.own, nil, c.published)
}

// refusedErrorAfter is how long the broker refuses a delivery's publish
// before that is logged as an error.
const refusedErrorAfter = time.Minute

// refusal says how the broker refused a publish that failed with err, and
// whether it did: a failure that is not a refusal (the connection lost)
// decides nothing about the message.
func (g *group) refusal(ctx context.Context, err error) (decide.PublishFailure, bool) {
	f := decide.PublishFailure{Err: err}
	switch missing := g.r.lostExchange(ctx, err); {
	case errors.Is(err, broker.ErrNacked):
		f.Kind = decide.PublishNacked
	case missing != "":
		f.Kind, f.Exchange = decide.PublishNoExchange, missing
	case errors.Is(err, broker.ErrInvalidMessage):
		f.Kind = decide.PublishInvalid
	case errors.Is(err, broker.ErrUnroutable):
		f.Kind = decide.PublishUnroutable
	default:
		return f, false
	}
	return f, true
}

// holdBeforeRequeue is how long a message that could go nowhere else waits
// before it goes back to its queue. A variable for the tests.
var holdBeforeRequeue = 5 * time.Second

// snapshot is what the registry shows of a group.
func (g *group) snapshot(ctx context.Context) ConsumerStatus {
	v := g.view.Load()
	st := ConsumerStatus{ID: g.c.ID, Kind: string(g.c.Kind), State: v.state, Queue: g.c.Queue, Size: v.size,
		Prefetch: v.prefetch, Handler: g.c.Handler, InFlight: g.inflight.Load(), Counters: map[string]int64{}}
	if s, ok := g.stalled(time.Now()); ok {
		st.Stalled = &s
	}
	for o, n := range g.counts {
		st.Counters[o] = n.Load()
	}
	if g.r.topo != nil {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if n, err := g.r.topo.Depth(qctx, g.c.Queue); err == nil {
			st.Depth = &n
		}
	}
	return st
}

// ConsumerStatus is one consumer group as the registry lists it.
type ConsumerStatus struct {
	ID       string           `json:"id"`
	Kind     string           `json:"kind"`
	State    string           `json:"state"`
	Queue    string           `json:"queue"`
	Depth    *int             `json:"depth,omitempty"` // ready messages on the queue
	Size     int              `json:"size"`
	Prefetch int              `json:"prefetch"`
	Handler  string           `json:"handler"`
	InFlight int64            `json:"in_flight"`
	Counters map[string]int64 `json:"counters"`
	// Stalled is set while the group holds deliveries and has finished
	// none for longer than its stall duration (Runtime.Stalls).
	Stalled *Stall `json:"stalled,omitempty"`
}
