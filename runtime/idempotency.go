package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/stores"
)

// The claim gate is what an idempotent consumer (`idempotent: true`) calls
// around its handler. It keys the idempotency store on (consumer id, message
// id) and coalesces the claims and confirms of concurrent deliveries into
// one round trip each, every caller keeping its own answer.
//
// How the consumer must use it, for each delivery d of consumer c
// (patterns.txt, "Idempotency"; FLOW-FORMAT §2, outcomes):
//
//  1. Precheck first. A delivery that Precheck dead-letters never reaches
//     the handler and needs no claim.
//
//  2. t, state, err := gate.Begin(ctx, d.MessageId).
//
//     err is ErrNoMessageID: nothing can deduplicate the message; it cannot
//     be fixed by a retry, so dead-letter it as fatal with that reason.
//
//     Any other err is a failure of the store (a lock timeout, a lost
//     connection): nothing was decided, and it is never read as a state. Do
//     not acknowledge and do not call the handler, and never requeue: a
//     requeue comes back at once and, on a quorum queue, counts against
//     x-delivery-limit. The store's outage (stores.ErrUnavailable) is not
//     the message's fault: hold it (decide.Hold, no attempt spent) and
//     pause the consumer until the store answers (infra.go). Any other
//     failure is a retryable failure of the delivery, through the ladder.
//
//     state AlreadyConfirmed: a previous delivery was handled. Acknowledge
//     without calling the handler and without publishing anything; count
//     OutcomeDuplicate.
//
//     state InProgress: another delivery holds a live claim. It is not a
//     duplicate (the holder may still fail or die). Carry out
//     InProgress(c, in): republish through `<queue>.retry.1s` with the
//     envelope unchanged (no attempt spent, never dead-lettered), then
//     acknowledge; count OutcomeInProgress. It comes round until the claim
//     is confirmed (then it is a duplicate) or its lease expires (then it
//     is claimed and handled). Never requeue it: a quorum queue counts
//     requeues against its delivery limit.
//
//     state Claimed: call the handler, then Decide.
//
//  3. After a Claimed delivery's decision:
//
//     Acknowledged or stopped (the handler succeeded): publish what the
//     decision says and wait for every publish to be confirmed and routed;
//     then gate.Confirm(ctx, t); then acknowledge. With nothing to publish,
//     Confirm and then acknowledge.
//
//     Retried or dead-lettered (the handler failed, or its result could
//     not be routed and the message is dead-lettered instead), and any
//     path that ends in a nack: gate.Release(ctx, t) first, then publish
//     the decision and acknowledge (or nack). Nothing was recorded, and a
//     released claim lets the retry, a requeue or a replay from .dlq be
//     claimed at once instead of waiting for the lease. A Release that
//     fails only delays that: the retry sees InProgress until the lease
//     ends. Log it and carry on.
//
//     Confirm refused (errors.Is(err, stores.ErrStaleClaim)): the handler
//     outlived the claim timeout and another delivery took the message
//     over; it handles (or handled) the message and publishes its own
//     result. Acknowledge anyway (this delivery's output is already
//     confirmed) and log a warning that names the claim timeout.
//
//     Confirm failed (any other error, or the store's outage outlasting
//     the tries Confirm makes within the lease): acknowledge anyway and
//     log it. The
//     output is already confirmed at the broker, so a nack would only make
//     the message come round as InProgress for the whole lease and then be
//     handled, and its output published, a second time. Unconfirmed, the
//     claim expires with its lease: a later duplicate is handled again,
//     which is at-least-once, never a loss.
//
// Why Confirm comes after the output is confirmed by the broker and before
// the acknowledgement. The seed's bargain is effectively-once handling with
// at-least-once publishing, and each other order breaks half of it:
//
//   - Confirm before publishing: a crash between the two leaves a confirmed
//     message whose output was never sent. Its redelivery is acknowledged as
//     a duplicate, and the output is lost without a trace: the silence the
//     outbox exists to prevent, reintroduced.
//   - Confirm after acknowledging: a crash between the two leaves a handled,
//     acknowledged message whose claim is still live. Every duplicate that
//     arrives within the lease is brought round as InProgress, and after it
//     the message is handled again.
//   - Confirm between the broker's confirm and the acknowledgement: a crash
//     before Confirm leaves an unacknowledged delivery, which the broker
//     redelivers. It finds the claim InProgress until the lease expires,
//     then takes it over and runs the handler again, so the output is
//     published a second time (at least once, never lost). A crash after
//     Confirm and before the acknowledgement: the redelivery is a duplicate,
//     acknowledged without running the handler, and the output went out
//     exactly once.
//
// The second output in the first crash case is a new message downstream. It
// is absorbed by the next idempotent consumer only if it carries the same
// message id as the first, so the output of an idempotent step should take a
// message id derived from (consumer id, input message id) rather than a
// random one.

// ErrNoMessageID is returned by claimGate.Begin for a delivery without a
// message_id: an idempotent consumer cannot deduplicate it.
var ErrNoMessageID = decide.ErrNoMessageID

// IdempotencyKey is the idempotency store key of a message for a consumer:
// "<consumer id>/<message id>". Consumer ids are wire names (letters,
// digits, dots and dashes), so the first slash ends the consumer id.
func IdempotencyKey(consumerID, messageID string) string {
	return consumerID + "/" + messageID
}

// Ticket is what Begin hands out for one delivery: the key, and for a
// Claimed answer the fencing token that Confirm and Release present. Holder
// and Until describe the claim found: the caller's own for Claimed, the
// other claimant's for InProgress, the retention's end for
// AlreadyConfirmed. They are for logs and decide nothing.
type Ticket struct {
	Key    string
	Token  stores.Token
	Holder string
	Until  time.Time
}

// claimStore is what the gate needs of the idempotency store.
type claimStore interface {
	TryClaimBatch(ctx context.Context, reqs []stores.ClaimRequest) ([]stores.Claim, error)
	ConfirmBatch(ctx context.Context, held []stores.Held) ([]error, error)
	Release(ctx context.Context, key string, token stores.Token) error
}

// Gate tuning. A batch leaves as soon as a round trip slot is free, so a
// lone delivery pays no added wait, and deliveries arriving while the
// previous batch is in the database (about a millisecond) go together.
const (
	gateMaxBatch    = 128              // claims or confirms per round trip
	gateMaxInFlight = 2                // round trips per gate at once
	gateOpTimeout   = 10 * time.Second // bound on one round trip
)

// claimGate claims, confirms and releases deliveries of one consumer in the
// idempotency store. It is safe for concurrent use by the consumer's
// handlers and starts no goroutines: the first caller of a batch sends it.
type claimGate struct {
	store    claimStore
	consumer string
	owner    string
	lease    time.Duration
	log      *slog.Logger
	claims   *coalescer[stores.ClaimRequest, stores.Claim]
	confirms *coalescer[stores.Held, error]
}

// newClaimGate returns the gate of consumer consumerID on store. Claims are
// leases of claimTimeout (zero: the store's claim timeout); they are
// recorded with an owner naming this process and consumer, for operators.
// A nil log discards.
func newClaimGate(store claimStore, consumerID string, claimTimeout time.Duration, log *slog.Logger) *claimGate {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	host, _ := os.Hostname()
	g := &claimGate{
		store:    store,
		consumer: consumerID,
		owner:    fmt.Sprintf("%s:%d %s", host, os.Getpid(), consumerID),
		lease:    claimTimeout,
		log:      log.With("consumer", consumerID),
	}
	g.claims = newCoalescer(gateMaxBatch, gateMaxInFlight, gateOpTimeout, store.TryClaimBatch)
	g.claims.abandoned = g.releaseAbandoned
	g.confirms = newCoalescer(gateMaxBatch, gateMaxInFlight, gateOpTimeout, store.ConfirmBatch)
	return g
}

// Begin claims messageID for the consumer before its handler runs and
// returns the store's answer. Only Claimed lets the handler run; the ticket
// then goes to Confirm or Release. An error is ErrNoMessageID or a failure
// of the store, and is never a ClaimState: the delivery must not be
// acknowledged. When ctx ends first Begin returns its error, and a claim the
// store granted meanwhile is released.
func (g *claimGate) Begin(ctx context.Context, messageID string) (Ticket, stores.ClaimState, error) {
	if messageID == "" {
		return Ticket{}, 0, ErrNoMessageID
	}
	key := IdempotencyKey(g.consumer, messageID)
	c, err := g.claims.do(ctx, stores.ClaimRequest{Key: key, Owner: g.owner, Lease: g.lease})
	if err != nil {
		return Ticket{Key: key}, 0, fmt.Errorf("consumer %q: claim message %q: %w", g.consumer, messageID, err)
	}
	switch c.State {
	case stores.Claimed, stores.AlreadyConfirmed, stores.InProgress:
	default:
		// Never read an answer the protocol does not have as in progress
		// or as a duplicate.
		return Ticket{Key: key}, 0, fmt.Errorf("consumer %q: claim message %q: the store answered %v, which is not a claim state", g.consumer, messageID, c.State)
	}
	return Ticket{Key: key, Token: c.Token, Holder: c.Owner, Until: c.ExpiresAt}, c.State, nil
}

// Confirm records that the delivery t was claimed for was handled and its
// output confirmed by the broker. It returns an error matching
// stores.ErrStaleClaim when the claim was taken over by another delivery,
// and any other error when the store failed. It completes even if ctx is
// cancelled (within a bound of its own): a confirm that is given up leaves
// a claim that blocks duplicates until its lease ends. A confirm the
// store's outage interrupts is tried again until the lease ends.
func (g *claimGate) Confirm(ctx context.Context, t Ticket) error {
	if t.Token == 0 {
		return fmt.Errorf("consumer %q: confirm %q: the ticket holds no claim (only a Claimed answer is confirmed)", g.consumer, t.Key)
	}
	var refused error
	err := g.untilLease(ctx, t, func() (err error) {
		refused, err = g.confirms.do(context.WithoutCancel(ctx), stores.Held{Key: t.Key, Token: t.Token})
		return err
	})
	if err != nil {
		return fmt.Errorf("consumer %q: confirm %q: %w", g.consumer, t.Key, err)
	}
	if refused != nil {
		return fmt.Errorf("consumer %q: confirm: %w", g.consumer, refused)
	}
	return nil
}

// Release gives up the claim of t after the handler failed, so that the
// next delivery of the message is claimed at once. It returns an error
// matching stores.ErrStaleClaim when t no longer holds the claim, and any
// other error when the store failed; either way the claim ends with its
// lease at the latest. Like Confirm, it is not cut short by ctx.
func (g *claimGate) Release(ctx context.Context, t Ticket) error {
	if t.Token == 0 {
		return fmt.Errorf("consumer %q: release %q: the ticket holds no claim", g.consumer, t.Key)
	}
	err := g.untilLease(ctx, t, func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), gateOpTimeout)
		defer cancel()
		return g.store.Release(rctx, t.Key, t.Token)
	})
	if err != nil {
		return fmt.Errorf("consumer %q: release: %w", g.consumer, err)
	}
	return nil
}

// Backoff of a confirm or release the store's outage interrupted.
const (
	gateRetryFirst = 50 * time.Millisecond
	gateRetryMax   = time.Second
)

// untilLease calls op, and again, with backoff, for as long as it fails
// with the store's outage (stores.ErrUnavailable: the connection dropped
// under it, the server restarting) and another try can still come before
// the lease of t ends, or until ctx ends (the runtime drains). Both confirm
// and release are safe to repeat (the same token confirms again; a release
// repeated is refused as stale): without this a claim whose confirm met a
// dropped connection stayed claimed, and its duplicates in progress, until
// its lease ended (S11 of the reliability suite).
func (g *claimGate) untilLease(ctx context.Context, t Ticket, op func() error) error {
	end := t.Until
	if end.IsZero() {
		end = time.Now().Add(max(g.lease, gateOpTimeout))
	}
	wait := gateRetryFirst
	for {
		err := op()
		if err == nil || !errors.Is(err, stores.ErrUnavailable) || time.Now().Add(wait).After(end) {
			return err
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return err
		}
		wait = min(2*wait, gateRetryMax)
	}
}

// releaseAbandoned releases claims granted to callers that stopped waiting
// for them, so that no claim is held by nobody until its lease ends.
func (g *claimGate) releaseAbandoned(ctx context.Context, reqs []stores.ClaimRequest, out []stores.Claim) {
	for i, c := range out {
		if c.State != stores.Claimed {
			continue
		}
		if err := g.store.Release(ctx, reqs[i].Key, c.Token); err != nil {
			g.log.Warn("claim of an abandoned delivery not released; it ends with its lease", "error", err)
		}
	}
}

// coalescer sends the requests of concurrent callers to the store together:
// a caller joins the open batch; the first caller of a batch waits for a
// round-trip slot (the batch keeps filling meanwhile, up to max) and sends
// it; every caller then takes its own answer. It starts no goroutines.
type coalescer[Req, Resp any] struct {
	send    func(ctx context.Context, reqs []Req) ([]Resp, error)
	max     int
	slots   chan struct{}
	timeout time.Duration
	// abandoned, when set, is given the requests and answers of callers
	// that stopped waiting before the answer came.
	abandoned func(ctx context.Context, reqs []Req, out []Resp)

	mu   sync.Mutex
	open *coalesced[Req, Resp]
}

type coalesced[Req, Resp any] struct {
	reqs []Req

	// Set under the coalescer's mutex.
	out      []Resp
	err      error
	finished bool
	gone     []int // callers that stopped waiting
	done     chan struct{}
}

func newCoalescer[Req, Resp any](max, inFlight int, timeout time.Duration, send func(context.Context, []Req) ([]Resp, error)) *coalescer[Req, Resp] {
	return &coalescer[Req, Resp]{send: send, max: max, slots: make(chan struct{}, inFlight), timeout: timeout}
}

// do sends r with whatever other requests are waiting and returns its answer.
func (c *coalescer[Req, Resp]) do(ctx context.Context, r Req) (Resp, error) {
	var zero Resp
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	c.mu.Lock()
	b := c.open
	lead := b == nil
	if lead {
		b = &coalesced[Req, Resp]{done: make(chan struct{})}
		c.open = b
	}
	i := len(b.reqs)
	b.reqs = append(b.reqs, r)
	if len(b.reqs) >= c.max {
		c.open = nil // full: the next caller starts a batch
	}
	c.mu.Unlock()

	if lead {
		// The leader sends even when its own ctx ends: the others wait on
		// this batch.
		c.flush(ctx, b)
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		c.mu.Lock()
		if !b.finished {
			b.gone = append(b.gone, i)
			c.mu.Unlock()
			return zero, ctx.Err()
		}
		c.mu.Unlock()
	}
	if b.err != nil {
		return zero, b.err
	}
	return b.out[i], nil
}

func (c *coalescer[Req, Resp]) flush(ctx context.Context, b *coalesced[Req, Resp]) {
	c.slots <- struct{}{}
	c.mu.Lock()
	if c.open == b {
		c.open = nil
	}
	reqs := b.reqs
	c.mu.Unlock()

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	out, err := c.send(sctx, reqs)
	cancel()
	<-c.slots
	if err == nil && len(out) != len(reqs) {
		err = fmt.Errorf("the store answered %d of %d requests", len(out), len(reqs))
	}

	c.mu.Lock()
	b.out, b.err, b.finished = out, err, true
	gone := b.gone
	c.mu.Unlock()
	close(b.done)

	if err == nil && len(gone) > 0 && c.abandoned != nil {
		greqs, gout := make([]Req, len(gone)), make([]Resp, len(gone))
		for j, i := range gone {
			greqs[j], gout[j] = reqs[i], out[i]
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		c.abandoned(actx, greqs, gout)
		cancel()
	}
}
