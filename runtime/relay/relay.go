// Package relay is the outbox relay: it publishes the records services
// wrote to the outbox table, unchanged, and marks each published only once
// the broker confirmed it and it reached a queue. A record with a
// deliver_at still ahead goes into the delay ladder, addressed to its
// exchange (ladder.go).
package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/stores"
)

// Options configure a Relay. A zero field takes the default given with
// it.
type Options struct {
	// Owner names the relay in the outbox's lease column. It must be unique
	// per relay process: two relays with one name would take each other's
	// leases for their own. Default "<host>:<pid>:<random>".
	Owner string
	// Batch is how many records one claim leases. Default 100.
	Batch int
	// Lease is how long claimed records stay with this relay; a relay that
	// dies loses them after it and another relay publishes them. It must
	// comfortably exceed the time a batch takes to publish. On a store that
	// claims with locks (PostgreSQL) a batch is held by its transaction:
	// a relay that dies releases it at once, and the database ends a
	// transaction left idle for Lease. Default 15s.
	Lease time.Duration
	// Poll is how long the relay waits after a claim found fewer than Batch
	// records. Default 200ms.
	Poll time.Duration
	// Exchanges, when set, is asked once a minute whether each exchange the
	// records name exists (a *broker.Topology on any connection). A record
	// for a missing exchange is then failed like an unroutable one. Without
	// it such a record closes the publishing channel each time it is
	// published: every publish in flight on it becomes indeterminate, and
	// the record is never counted as failed.
	Exchanges exchangeChecker
	// Ladder, when set, declares the delay ladder (create-only, as every
	// runtime that needs it does) the first time a record is due later
	// (a *broker.Topology on any connection): such a record is published
	// into the ladder (FLOW-FORMAT §4), and a ladder nobody declared would
	// close the publishing channel. Run sets it. Without it the ladder is
	// taken to exist.
	Ladder ladderDeclarer
	// LadderUnit is for tests only, as runtime.Options.LadderUnit: what
	// one second of the delay ladder is (a whole number of milliseconds;
	// see plan.Ladder). 0 is the real 1 s.
	LadderUnit time.Duration
	// Log receives lifecycle events and failed records; nil discards.
	Log *slog.Logger
	// Tracer makes a producer span of each record's publish
	// (runtime/tracing), linked to the context the record was written in
	// (its traceparent column, or the traceparent its headers carry), not
	// its child: the publish is one of a batch. That context stays the
	// message's traceparent, so that its consumers are in the writer's
	// trace, and the publish is its x-acemq-trace-link; nil traces
	// nothing.
	Tracer *tracing.Tracer
}

// relayStore is what the relay needs of the outbox (stores.OutboxRelay).
type relayStore interface {
	ClaimBatch(ctx context.Context, owner string, n int, lease time.Duration) ([]stores.OutboxRecord, error)
	MarkPublished(ctx context.Context, ids []int64, owner string) error
	MarkFailed(ctx context.Context, id int64, owner, reason string) (stuck bool, err error)
}

// relayLocker is an outbox whose claims hold their rows by a lock in an
// open transaction (stores.OutboxLocker: PostgreSQL). The relay claims
// through it when the store has it: one write per published row instead of
// a lease write and a mark.
type relayLocker interface {
	ClaimLocked(ctx context.Context, owner string, n int, lease time.Duration) (stores.LockedBatch, error)
}

// relayPublisher is what the relay needs of a confirmed, mandatory
// publisher (*broker.Publisher): done is called once with nil only when the
// broker confirmed the message and routed it to a queue.
type relayPublisher interface {
	PublishFunc(ctx context.Context, msg broker.Message, done func(error)) error
}

// exchangeChecker reports whether an exchange exists (*broker.Topology).
type exchangeChecker interface {
	ExchangeExists(ctx context.Context, name string) (bool, error)
}

// Stats are running totals since New.
type Stats struct {
	Claimed   int64 // records leased
	Published int64 // confirmed, routed and marked published
	Failed    int64 // unroutable, nacked or unpublishable, marked failed
	Stuck     int64 // of Failed, those that reached the attempt limit
	Left      int64 // outcome unknown or not marked: published again (after the lease, or at once when a held batch could not be finished)
	LeaseLost int64 // marked too late: another relay had taken them over
}

// Relay publishes the records of the transactional outbox (patterns.txt,
// "The transactional outbox"). It claims a batch under a lease, publishes
// each record's bytes unchanged with its stored properties and headers,
// mandatory and confirmed, many in flight, and marks a record published only
// once the broker confirmed it and routed it to a queue. A record the broker
// returns as unroutable (or nacks, or that cannot be published at all) is
// marked failed with the reason, which counts an attempt; after the store's
// limit it is stuck, no longer handed out, and listed by `acemq-flow outbox
// list --stuck`. A record whose outcome is unknown (the channel closed
// before the confirm) is left: its lease expires and it is published again.
//
// A record whose DeliverAt is still ahead is published, the same way, into
// the delay ladder instead, with its exchange, routing key and due time in
// the ladder's headers (FLOW-FORMAT §4); the relay declares the ladder the
// first time it needs it, and the `.due` consumer of a runtime delivers the
// message when due. One due later than the ladder holds (2^28 - 1 s) fails
// with the reason.
//
// On a store that claims with locks (stores.OutboxLocker: PostgreSQL) a
// batch is held by an open transaction instead of a lease written to its
// rows, and once its last record has an outcome, one commit writes them
// all: one write per published row instead of two. At most
// relayHeldBatches batches are held at once, each on a connection of the
// pool the PostgreSQL store keeps for held batches.
//
// Publishing is at least once: a relay that dies between the confirm and the
// mark leaves records that the next relay publishes again, with the same
// message id, for idempotent consumers to absorb. Records are claimed oldest
// first, but a record that failed is retried after newer ones, and several
// relays publish side by side, so order across records is not kept.
//
// Lifecycle: NewRelay allocates; Run relays until ctx ends. A Relay runs
// once; Stats may be called at any time.
type Relay struct {
	store  relayStore
	locker relayLocker // nil unless the store claims with locks
	pub    relayPublisher
	opts   Options
	log    *slog.Logger

	maxRows  int64        // records claimed and not yet settled, at most
	inflight atomic.Int64 // records claimed and not yet settled
	freed    chan struct{}

	// With a locker: a slot per batch held open, and the batches not yet
	// finishing (aborted if the relay stops before they complete).
	heldSlots chan struct{}
	heldMu    sync.Mutex
	held      map[*heldBatch]struct{}

	exchanges *broker.ExchangeCache // nil when opts.Exchanges is

	ladder          decide.Ladder
	ladderMu        sync.Mutex
	ladderDone      bool  // the ladder was declared
	ladderRefused   error // the broker's latest refusal of it, for ladderRefusalTTL
	ladderRefusedAt time.Time

	claimed, published, failed, stuck, left, leaseLost atomic.Int64
}

// relayClaimers is how many claims a relay has in flight at once. With two,
// claims came too slowly to refill the slots of the batches that finished:
// on PostgreSQL the publisher's window was short of full for 9-17% of a run,
// 7-12% with three.
const relayClaimers = 3

// relayMarkers is how many marks a relay has in flight at once.
const relayMarkers = 2

// relayHeldBatches is how many batches a relay with a locker holds open at
// once. Each holds a database connection until its records are settled,
// from the pool the PostgreSQL store keeps for held batches, whose size
// (heldConns = 9 in stores/postgres) is sized for relayHeldBatches = 8, so
// change the two together. A batch holds its slot from its claim through
// its publishing and its last confirm (a window behind) to its commit: it
// takes about twice the publisher's window of rows to keep that window
// full. With three batches of 100 the relay published 10% fewer rows a
// second than with six; with six, the window was short of full for 7-12% of
// a run, mostly while every batch was held, and with eight for 4-8%.
const relayHeldBatches = 8

// relayExchangeTTL is how long an exchange found to exist is trusted.
const relayExchangeTTL = time.Minute

// New returns a relay reading store (a stores.OutboxRelay; it needs
// ClaimBatch, MarkPublished and MarkFailed) and publishing with pub (a
// *broker.Publisher on a connection of its own: the publisher's window
// bounds the records in flight). It does no I/O.
func New(store relayStore, pub relayPublisher, opts Options) (*Relay, error) {
	if store == nil || pub == nil {
		return nil, errors.New("outbox relay: a store and a publisher are required")
	}
	if opts.Batch < 0 || opts.Lease < 0 || opts.Poll < 0 {
		return nil, fmt.Errorf("outbox relay: batch %d, lease %s and poll %s must not be negative", opts.Batch, opts.Lease, opts.Poll)
	}
	if opts.Batch == 0 {
		opts.Batch = 100
	}
	if opts.Lease == 0 {
		opts.Lease = 15 * time.Second
	}
	if opts.Poll == 0 {
		opts.Poll = 200 * time.Millisecond
	}
	if opts.Owner == "" {
		opts.Owner = defaultRelayOwner()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	locker, _ := store.(relayLocker)
	return &Relay{
		store: store, locker: locker, pub: pub, opts: opts,
		log:       opts.Log.With("relay", opts.Owner),
		maxRows:   int64(relayClaimers * 4 * opts.Batch),
		freed:     make(chan struct{}, 1),
		heldSlots: make(chan struct{}, relayHeldBatches),
		held:      map[*heldBatch]struct{}{},
		exchanges: exchangeCache(opts.Exchanges),
		ladder:    decide.Ladder{Unit: opts.LadderUnit},
	}, nil
}

// exchangeCache keeps for relayExchangeTTL that an exchange exists; that
// one does not is never kept beyond the batch that asked.
func exchangeCache(c exchangeChecker) *broker.ExchangeCache {
	if c == nil {
		return nil
	}
	return broker.NewExchangeCache(c.ExchangeExists, relayExchangeTTL, 0)
}

func defaultRelayOwner() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Owner returns the name the relay leases records under.
func (r *Relay) Owner() string { return r.opts.Owner }

// Stats returns running totals.
func (r *Relay) Stats() Stats {
	return Stats{
		Claimed: r.claimed.Load(), Published: r.published.Load(), Failed: r.failed.Load(),
		Stuck: r.stuck.Load(), Left: r.left.Load(), LeaseLost: r.leaseLost.Load(),
	}
}

// Run runs a relay on store until ctx ends, publishing on a broker
// connection of its own (named "acemq-flow relay"), checking each exchange
// the records name with a passive declare, and declaring the delay ladder
// the first time a record is due later, as `acemq-flow relay` and `run
// --relay` do. It returns an error only when it cannot start; the
// URL in it is redacted. The caller closes store.
func Run(ctx context.Context, amqpURL string, store relayStore, opts Options) error {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	conn, err := broker.Open(ctx, amqpURL, broker.ConnOptions{Name: "acemq-flow relay", Log: opts.Log})
	if err != nil {
		return fmt.Errorf("outbox relay: connect to the broker: %w", err)
	}
	defer conn.Close()
	topo := broker.NewTopology(conn, opts.Log)
	defer topo.Close()
	// Enough confirms in flight for every claim the relay has out.
	pub, err := broker.OpenPublisher(ctx, conn, broker.PublisherOptions{Window: max(256, relayClaimers*opts.Batch), Log: opts.Log})
	if err != nil {
		return fmt.Errorf("outbox relay: %w", err)
	}
	defer pub.Close()
	if opts.Exchanges == nil {
		opts.Exchanges = topo
	}
	if opts.Ladder == nil {
		opts.Ladder = topo
	}
	r, err := New(store, pub, opts)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// relayResult is the outcome of publishing one record.
type relayResult struct {
	rec   *stores.OutboxRecord
	err   error
	batch *heldBatch // the locked batch rec belongs to, if any
}

// heldBatch gathers the outcomes of a locked batch's records until the last
// one arrives; then Finish writes them all. Only the mark loop touches it
// until then.
type heldBatch struct {
	lb        stores.LockedBatch
	size      int
	pending   int
	published []int64
	failures  []relayResult // records whose publish failed, with why
}

// Run relays until ctx ends, then stops claiming, waits for the outcomes of
// the records in flight and marks them, within one lease; what is still
// unsettled then is published again after its lease. A store or broker
// failure is logged and retried, never returned: Run returns nil once it
// has stopped.
func (r *Relay) Run(ctx context.Context) error {
	r.log.Info("relay started", "batch", r.opts.Batch, "lease", r.opts.Lease, "poll", r.opts.Poll)
	// Marks still count after ctx ends: a record confirmed and not marked is
	// published twice. They get one lease to finish.
	drainCtx, cancelDrain := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelDrain()
	stopDrainTimer := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.opts.Lease, cancelDrain)
		context.AfterFunc(drainCtx, func() { t.Stop() })
	})
	defer stopDrainTimer()

	// Every claimed record yields exactly one result, and at most maxRows
	// are unsettled, so a publisher callback never blocks on this channel.
	results := make(chan relayResult, r.maxRows)
	total := make(chan int64, 1)
	var wg sync.WaitGroup
	wg.Go(func() { r.markLoop(ctx, drainCtx, results, total) })
	// Claims are the relay's longest round trips (a write of Batch rows and
	// a commit); several in flight, each handing its batch to the one
	// publishing loop and claiming the next at once, keep the publisher's
	// window full while they wait. A claim loop that also published its
	// batch claimed again only once the window had taken all of it: with
	// both loops publishing or both claiming, the window ran dry (it was
	// short of full for a quarter to a third of a relay run).
	var claimed atomic.Int64
	var claimers, publishing sync.WaitGroup
	ready := make(chan claimedBatch, relayClaimers)
	publishing.Go(func() {
		for b := range ready {
			r.publishBatch(drainCtx, b, results)
		}
	})
	for range relayClaimers {
		claimers.Go(func() { claimed.Add(r.claimLoop(ctx, drainCtx, ready)) })
	}
	claimers.Wait()
	close(ready)
	publishing.Wait()
	total <- claimed.Load()
	wg.Wait()
	// Batches whose records were not all settled within the drain: roll
	// them back, so that they are pending again at once.
	r.heldMu.Lock()
	for b := range r.held {
		b.lb.Abort()
		delete(r.held, b)
	}
	r.heldMu.Unlock()
	st := r.Stats()
	r.log.Info("relay stopped", "published", st.Published, "failed", st.Failed, "stuck", st.Stuck, "left", st.Left)
	return nil
}

// claimedBatch is a claimed batch on its way to the publishing loop.
type claimedBatch struct {
	recs      []stores.OutboxRecord
	held      *heldBatch // nil unless the store claims with locks
	claimedAt time.Time
}

// claimLoop claims batches and hands them to the publishing loop until ctx
// ends, and returns how many records it claimed.
func (r *Relay) claimLoop(ctx, drainCtx context.Context, ready chan<- claimedBatch) int64 {
	var total int64
	batch := int64(r.opts.Batch)
	for failures := 0; ctx.Err() == nil; {
		if !r.reserve(ctx, batch) {
			return total
		}
		// Not cut short by ctx: a claim cancelled mid-statement may still
		// commit, leaving records leased to nobody until the lease ends.
		claimedAt := time.Now()
		recs, held, err := r.claim(ctx, drainCtx)
		r.release(int(batch) - len(recs))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			d := backoffDelay(failures, r.opts.Poll, 10*time.Second)
			if failures == 10 {
				r.log.Error("outbox store unreachable; the relay keeps trying", "error", err, "attempt", failures)
			} else {
				r.log.Warn("outbox claim failed", "error", err, "attempt", failures, "duration", d)
			}
			if !sleepFor(ctx, d) {
				break
			}
			continue
		}
		failures = 0
		r.claimed.Add(int64(len(recs)))
		total += int64(len(recs))
		if len(recs) > 0 {
			// Once claimed, a batch is published even when ctx ends: the
			// publishing loop reads until every claim loop has returned.
			ready <- claimedBatch{recs: recs, held: held, claimedAt: claimedAt}
		}
		if len(recs) < r.opts.Batch && !sleepFor(ctx, r.opts.Poll) {
			break
		}
	}
	return total
}

// publishBatch publishes a claimed batch's records; each outcome arrives on
// results. The batch is leased: it is published even when the relay stops
// meanwhile, within the drain, but not past the lease (less a margin for
// the marks): a record still waiting for the broker then (a resource alarm,
// an outage) is left to its lease, which another claim, perhaps this
// relay's own, may have taken already.
func (r *Relay) publishBatch(drainCtx context.Context, b claimedBatch, results chan<- relayResult) {
	checked := map[string]error{}
	pctx, cancel := context.WithDeadline(drainCtx, b.claimedAt.Add(r.opts.Lease-leaseMargin(r.opts.Lease)))
	defer cancel()
	for i := range b.recs {
		rec := &b.recs[i]
		if err := r.publish(pctx, rec, b.held, checked, results); err != nil {
			results <- relayResult{rec: rec, err: err, batch: b.held}
		}
	}
}

// leaseMargin is how long before its lease ends a batch stops publishing:
// its confirms and marks still have to come in.
func leaseMargin(lease time.Duration) time.Duration {
	return min(lease/4, 2*time.Second)
}

// claim takes the next batch: locked when the store has a locker (held is
// then its batch, or nil when it is empty), leased otherwise. It returns
// an error when ctx ended while it waited for a batch slot.
func (r *Relay) claim(ctx, drainCtx context.Context) (recs []stores.OutboxRecord, held *heldBatch, err error) {
	if r.locker == nil {
		recs, err = r.store.ClaimBatch(drainCtx, r.opts.Owner, r.opts.Batch, r.opts.Lease)
		return recs, nil, err
	}
	select {
	case r.heldSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	lb, err := r.locker.ClaimLocked(drainCtx, r.opts.Owner, r.opts.Batch, r.opts.Lease)
	if err != nil {
		<-r.heldSlots
		return nil, nil, err
	}
	recs = lb.Records()
	if len(recs) == 0 {
		<-r.heldSlots
		return nil, nil, nil
	}
	held = &heldBatch{lb: lb, size: len(recs), pending: len(recs)}
	r.heldMu.Lock()
	r.held[held] = struct{}{}
	r.heldMu.Unlock()
	return recs, held, nil
}

// publish sends rec; the outcome arrives on results, unless publish returns
// an error, which is then the outcome. The properties were checked when the
// row was read (an unreadable row fails in outboxMessage), the rest of the
// message by the publisher.
func (r *Relay) publish(ctx context.Context, rec *stores.OutboxRecord, held *heldBatch, checked map[string]error, results chan<- relayResult) error {
	msg, err := outboxMessage(rec)
	if err != nil {
		return err
	}
	if err := r.delay(ctx, rec, &msg); err != nil {
		return err
	}
	if err, ok := checked[rec.Exchange]; ok {
		if err != nil {
			return err
		}
	} else {
		err := r.checkExchange(ctx, rec.Exchange)
		// Only an answer is kept for the batch: after a connection blip,
		// the next record asks again.
		var missing *missingExchangeError
		var invalid *broker.InvalidMessageError
		if err == nil || errors.As(err, &missing) || errors.As(err, &invalid) {
			checked[rec.Exchange] = err
		}
		if err != nil {
			return err
		}
	}
	t := r.opts.Tracer
	if t == nil {
		return r.pub.PublishFunc(ctx, msg, func(err error) { results <- relayResult{rec: rec, err: err, batch: held} })
	}
	// The writer's context (the row's column, unless the headers carry a
	// creation context of their own) is the message's creation context;
	// the publish, one of a batch, links to it.
	h, span := t.Publish(ctx, tracing.Publishing{Exchange: msg.Exchange, RoutingKey: msg.RoutingKey,
		MessageID: msg.MessageId, CorrelationID: msg.CorrelationId, BodySize: len(msg.Body),
		Headers: tracing.WithCreation(msg.Headers, rec.TraceParent), Relayed: true}, tracing.AttrOutboxID.Int64(rec.ID))
	msg.Headers = amqp.Table(h)
	err = r.pub.PublishFunc(ctx, msg, func(err error) {
		tracing.End(span, err, "")
		results <- relayResult{rec: rec, err: err, batch: held}
	})
	if err != nil {
		tracing.End(span, err, "")
	}
	return err
}

// missingExchangeError is the failure of a record whose exchange does not
// exist.
type missingExchangeError struct{ exchange string }

func (e *missingExchangeError) Error() string {
	return fmt.Sprintf("exchange %q does not exist; declare it, or correct the record's exchange", e.exchange)
}

// checkExchange returns nil when name exists (or nothing is asked), a
// *missingExchangeError when it does not, an *InvalidMessageError when AMQP
// cannot carry the name, and an *IndeterminateError when the broker could
// not be asked.
func (r *Relay) checkExchange(ctx context.Context, name string) error {
	if name == "" || r.opts.Exchanges == nil {
		return nil
	}
	if len(name) > 255 {
		// Not asked about: a name AMQP cannot carry shuts the connection
		// down (written by another program; Add refuses it).
		return &broker.InvalidMessageError{Exchange: name, Field: "exchange", Len: len(name)}
	}
	exists, err := r.exchanges.Exists(ctx, name)
	if err != nil {
		return &broker.IndeterminateError{Exchange: name, Err: err}
	}
	if !exists {
		return &missingExchangeError{exchange: name}
	}
	return nil
}

// markLoop settles results: confirmed records are marked published in
// bulk, with up to relayMarkers marks in the database at once (records that
// confirm meanwhile go in the next one), failures are marked failed,
// unknown outcomes are left for their lease to expire. It returns when every
// claimed record is settled or the drain ends.
func (r *Relay) markLoop(ctx, drainCtx context.Context, results <-chan relayResult, total <-chan int64) {
	var settled, inMarks int64
	want := int64(-1)
	var ok []*stores.OutboxRecord
	slots := make(chan struct{}, relayMarkers)
	marked := make(chan int, relayMarkers+relayHeldBatches)
	var marks sync.WaitGroup
	defer func() {
		// A mark or finish frees its slot before it reports, so more of them
		// can be reporting than marked holds: keep reading until all ended.
		ended := make(chan struct{})
		go func() { marks.Wait(); close(ended) }()
		for {
			select {
			case <-marked:
			case <-ended:
				return
			}
		}
	}()
	take := func(res relayResult) {
		if res.batch == nil {
			settled += r.settle(drainCtx, res, &ok)
			return
		}
		// A locked batch is settled by its finish, once all its records
		// have an outcome.
		if b := r.settleHeld(res); b != nil {
			inMarks += int64(b.size)
			marks.Go(func() {
				r.finish(drainCtx, b)
				r.release(b.size)
				<-r.heldSlots
				marked <- b.size
			})
		}
	}
	for want < 0 || settled < want {
		select {
		case res := <-results:
			take(res)
		case n := <-marked:
			settled += int64(n)
			inMarks -= int64(n)
		case want = <-total:
			continue
		case <-drainCtx.Done():
			// Marks in the database account for themselves.
			n := r.claimed.Load() - settled - inMarks
			r.left.Add(n)
			r.log.Warn("relay stopped with records in flight; they are published again after their lease", "in_flight", n)
			return
		}
		for more := true; more; {
			select {
			case res := <-results:
				take(res)
			default:
				more = false
			}
		}
		if len(ok) == 0 {
			continue
		}
		select {
		case slots <- struct{}{}:
			recs := ok
			ok = nil
			inMarks += int64(len(recs))
			marks.Go(func() {
				r.markPublished(ctx, drainCtx, recs)
				r.release(len(recs))
				<-slots
				marked <- len(recs)
			})
		default:
			// Every mark slot is busy: keep collecting for the next one.
		}
	}
}

// settleHeld records the outcome of a record of a locked batch, and returns
// the batch once every one of its records has an outcome.
func (r *Relay) settleHeld(res relayResult) *heldBatch {
	b := res.batch
	switch {
	case res.err == nil:
		b.published = append(b.published, res.rec.ID)
	case leaveForLease(res.err):
		r.unknownOutcome(res.rec, res.err)
	default:
		b.failures = append(b.failures, res)
	}
	if b.pending--; b.pending > 0 {
		return nil
	}
	r.heldMu.Lock()
	delete(r.held, b)
	r.heldMu.Unlock()
	return b
}

// finish writes a locked batch's outcomes and commits. Records neither
// published nor failed had no verdict: Finish leases them.
func (r *Relay) finish(ctx context.Context, b *heldBatch) {
	failed := make([]stores.FailedRecord, len(b.failures))
	for i, f := range b.failures {
		failed[i] = stores.FailedRecord{ID: f.rec.ID, Reason: f.err.Error()}
	}
	stuck, err := b.lb.Finish(ctx, b.published, failed)
	var lost *stores.LeaseLostError
	switch {
	case errors.As(err, &lost):
		r.leaseLost.Add(int64(b.size))
		r.log.Warn("outbox batch held past its lease; the database ended it and its records are published again", "records", b.size, "outbox_ids", lost.IDs, "error", err)
		return
	case err != nil:
		r.left.Add(int64(b.size))
		r.log.Error("outbox batch published but its marks may not be committed; records left unmarked are published again", "records", b.size,
			"outbox_ids", batchIDs(b), "error", err)
		return
	}
	r.published.Add(int64(len(b.published)))
	r.left.Add(int64(b.size - len(b.published) - len(b.failures)))
	for _, f := range b.failures {
		r.reportFailed(f.rec, f.err, slices.Contains(stuck, f.rec.ID), nil)
	}
}

// batchIDs lists the ids of the records a held batch settled.
func batchIDs(b *heldBatch) []int64 {
	ids := make([]int64, 0, len(b.published)+len(b.failures))
	ids = append(ids, b.published...)
	for _, f := range b.failures {
		ids = append(ids, f.rec.ID)
	}
	return ids
}

// unknownOutcome notes a record published without a verdict.
func (r *Relay) unknownOutcome(rec *stores.OutboxRecord, err error) {
	if broker.ReplyCode(err) == amqp.NotFound {
		// An exchange vanished since it was checked: ask again.
		if r.exchanges != nil {
			r.exchanges.Forget()
		}
	}
	r.log.Debug("outbox record outcome unknown; published again after its lease", "outbox_id", rec.ID, "message_id", rec.Properties.MessageID, "error", err)
}

// settle handles one result and returns 1 when it is settled now, 0 when it
// joins ok to be marked published.
func (r *Relay) settle(drainCtx context.Context, res relayResult, ok *[]*stores.OutboxRecord) int64 {
	rec, err := res.rec, res.err
	if err == nil {
		*ok = append(*ok, rec)
		return 0
	}
	defer r.release(1)
	if leaveForLease(err) {
		r.unknownOutcome(rec, err)
		r.left.Add(1)
		return 1
	}
	stuck, merr := r.store.MarkFailed(drainCtx, rec.ID, r.opts.Owner, err.Error())
	r.reportFailed(rec, err, stuck, merr)
	return 1
}

// reportFailed counts and logs a record whose publish failed with err, once
// the store recorded it (stuck: it reached the attempt limit) or failed to
// (merr).
func (r *Relay) reportFailed(rec *stores.OutboxRecord, err error, stuck bool, merr error) {
	attrs := []any{"outbox_id", rec.ID, "exchange", rec.Exchange, "routing_key", rec.RoutingKey,
		"message_id", rec.Properties.MessageID, "attempt", rec.Attempts + 1, "error", err}
	switch {
	case errors.Is(merr, stores.ErrLeaseLost):
		r.leaseLost.Add(1)
		r.log.Warn("outbox record failed after its lease was taken over", attrs...)
	case merr != nil:
		r.left.Add(1)
		r.log.Warn("outbox record failed and could not be marked; retried after its lease", append(attrs, "mark_error", merr)...)
	case stuck:
		r.failed.Add(1)
		r.stuck.Add(1)
		r.log.Error("outbox record stuck: no longer published; fix the cause and requeue it (see `acemq-flow outbox list --stuck`)", attrs...)
	default:
		r.failed.Add(1)
		r.log.Warn("outbox record not published; retried later", attrs...)
	}
}

// leaveForLease reports whether a publish failed without a verdict on the
// record: the outcome is unknown, or the relay or its publisher stopped.
// Those records are neither published nor failed; their lease decides.
func leaveForLease(err error) bool {
	return errors.Is(err, broker.ErrIndeterminate) || errors.Is(err, broker.ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// markPublished marks recs published, retrying a failing store within one
// lease while the relay runs (once, when it is stopping).
func (r *Relay) markPublished(ctx, drainCtx context.Context, recs []*stores.OutboxRecord) {
	ids := make([]int64, len(recs))
	for i, rec := range recs {
		ids[i] = rec.ID
	}
	deadline := time.Now().Add(r.opts.Lease)
	for attempt := 1; ; attempt++ {
		err := r.store.MarkPublished(drainCtx, ids, r.opts.Owner)
		var lost *stores.LeaseLostError
		switch {
		case err == nil:
			r.published.Add(int64(len(ids)))
			return
		case errors.As(err, &lost):
			r.published.Add(int64(len(ids) - len(lost.IDs)))
			r.leaseLost.Add(int64(len(lost.IDs)))
			r.log.Warn("outbox lease lost: records published after another relay took them over; it publishes them again", "records", len(lost.IDs), "outbox_ids", lost.IDs, "error", err)
			return
		}
		d := backoffDelay(attempt, 50*time.Millisecond, 2*time.Second)
		if ctx.Err() != nil || time.Now().Add(d).After(deadline) || !sleepFor(drainCtx, d) {
			r.left.Add(int64(len(ids)))
			r.log.Error("outbox records published but not marked; they are published again after their lease", "records", len(ids), "outbox_ids", ids, "error", err)
			return
		}
		r.log.Warn("outbox mark failed; retrying", "records", len(ids), "attempt", attempt, "error", err)
	}
}

// reserve waits for room for n more unsettled records and takes it.
// Claiming no further ahead than a few batches keeps records under a lease
// only while the broker and the marks keep up, and bounds the results a
// publisher callback may have to queue.
func (r *Relay) reserve(ctx context.Context, n int64) bool {
	for {
		cur := r.inflight.Load()
		if cur+n <= r.maxRows {
			if r.inflight.CompareAndSwap(cur, cur+n) {
				return true
			}
			continue
		}
		select {
		case <-r.freed:
		case <-ctx.Done():
			return false
		}
	}
}

// release returns n settled (or never claimed) records' room to the claim
// loops.
func (r *Relay) release(n int) {
	r.inflight.Add(-int64(n))
	select {
	case r.freed <- struct{}{}:
	default:
	}
}

// outboxMessage is the message a record is published as: its body bytes as
// stored, its content type, and the properties and headers of its
// properties column. Nothing is decoded or re-encoded but the headers, whose
// JSON values become the AMQP values they denote.
func outboxMessage(rec *stores.OutboxRecord) (broker.Message, error) {
	if rec.Invalid != nil {
		return broker.Message{}, fmt.Errorf("%w; correct the row's properties column as the outbox table's contract says (stores/README.md)", rec.Invalid)
	}
	p := rec.Properties
	headers, err := headerTable(p.Headers)
	if err != nil {
		return broker.Message{}, fmt.Errorf("outbox record %d: %w", rec.ID, err)
	}
	pub := amqp.Publishing{
		Headers:         headers,
		ContentType:     rec.ContentType,
		ContentEncoding: p.ContentEncoding,
		DeliveryMode:    p.DeliveryMode,
		Priority:        p.Priority,
		CorrelationId:   p.CorrelationID,
		ReplyTo:         p.ReplyTo,
		Expiration:      p.Expiration,
		MessageId:       p.MessageID,
		Type:            p.Type,
		UserId:          p.UserID,
		AppId:           p.AppID,
		Body:            rec.Body,
	}
	if p.Timestamp != 0 {
		pub.Timestamp = time.Unix(p.Timestamp, 0).UTC()
	}
	return broker.Message{Exchange: rec.Exchange, RoutingKey: rec.RoutingKey, Publishing: pub}, nil
}

// headerTable converts the JSON header values of the properties column to
// AMQP field values: strings, booleans and null as they are, integers as
// signed 64-bit integers, other numbers as doubles (a number neither can
// hold stays its decimal text), arrays as field arrays and objects as
// tables.
func headerTable(h map[string]any) (amqp.Table, error) {
	if len(h) == 0 {
		return nil, nil
	}
	t := make(amqp.Table, len(h))
	for k, v := range h {
		fv, err := headerValue(v)
		if err != nil {
			return nil, fmt.Errorf("header %q: %w", k, err)
		}
		t[k] = fv
	}
	return t, nil
}

func headerValue(v any) (any, error) {
	switch v := v.(type) {
	case nil, string, bool, int64:
		return v, nil
	case float64:
		return v, nil
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return i, nil
		}
		if f, err := strconv.ParseFloat(string(v), 64); err == nil {
			return f, nil
		}
		return string(v), nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			fv, err := headerValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = fv
		}
		return out, nil
	case map[string]any:
		t := make(amqp.Table, len(v))
		for k, e := range v {
			fv, err := headerValue(e)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", k, err)
			}
			t[k] = fv
		}
		return t, nil
	}
	return nil, fmt.Errorf("a header value of type %T cannot be published", v)
}

// backoffDelay doubles from lo per failure, capped at hi.
func backoffDelay(failures int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < failures && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// sleepFor waits d and reports whether ctx is still live.
func sleepFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
