package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/stores"
)

// claimCheckStep is the claim check around the rest of the step
// (FLOW-FORMAT §6): a delivery that carries a reference gets its body back
// from the blob store before anything reads it, so that the payload checks
// and the handler see the body as it was sent; what the decision publishes
// above its threshold goes to the blob store and travels as a reference.
//
// A reference that cannot be honoured (malformed, a blob that is missing or
// fails its SHA-256 check) is dead-lettered with kind claim-check, the key
// in its reason, never retried: no retry brings the blob back. A blob store
// that fails otherwise decides nothing about the message: an outage
// (stores.ErrUnavailable) holds it and pauses the group until the store
// answers (infra.go), any other failure retries it through its ladder, the
// reference unchanged.
//
// A message republished as it arrived (a retry, a dead letter, a park)
// carries the reference it arrived with, never the body: its blob is
// already stored, and a queue must never hold the payload.
func (g *group) claimCheckStep(next stepFunc) stepFunc {
	return func(ctx context.Context, d *delivery) decide.Decision {
		orig := d.in
		ref, checked, err := decide.ReadClaimCheck(orig.Props)
		if err != nil {
			return decide.DeadLetter(g.c, orig, decide.ClaimCheckKind, err.Error(), time.Now())
		}
		var body []byte
		if checked {
			var lost bool
			if body, lost, err = g.fetchBlob(ctx, ref); err != nil {
				if lost {
					return decide.DeadLetter(g.c, orig, decide.ClaimCheckKind, err.Error(), time.Now())
				}
				return g.storeFailed(orig, decide.StoreBlobs, err)
			}
			m, err := decide.RestoreClaimCheck(orig.Props, ref, body)
			if err != nil {
				return decide.DeadLetter(g.c, orig, decide.ClaimCheckKind, err.Error(), time.Now())
			}
			d.in = decide.InboundOf(m)
		}
		dec := next(ctx, d)
		// What follows the decision (a publish the broker refuses turned
		// into a retry or a dead letter, group.publishFailed) republishes
		// the delivery as it arrived: the reference, not the body fetched.
		d.in = orig
		for i := range dec.Publish {
			p := &dec.Publish[i].Message
			if checked && sameBytes(p.Body, body) {
				// The body as it arrived: its reference, whose blob is there.
				*p = decide.WithClaimCheck(*p, ref)
				continue
			}
			if g.r.opts.Blobs == nil || !decide.ShouldClaimCheck(len(p.Body), g.c.ClaimCheck.Output) {
				continue
			}
			key, err := g.r.opts.Blobs.PutBlob(ctx, p.Body)
			if err != nil {
				// Nothing is published: the delivery is tried again, as it
				// arrived, once the store answers.
				return g.storeFailed(orig, decide.StoreBlobs, fmt.Errorf("put the result of %d bytes: %w", len(p.Body), err))
			}
			*p = decide.WithClaimCheck(*p, decide.ClaimCheck{Key: key, Size: int64(len(p.Body)), ContentType: p.ContentType})
		}
		return dec
	}
}

// fetchBlob returns the body ref names. lost is true when the reference
// can never be honoured (no blob store, a blob missing or damaged; the
// error names the key); any other error is the store's failure, to be
// retried.
func (g *group) fetchBlob(ctx context.Context, ref decide.ClaimCheck) (body []byte, lost bool, err error) {
	if g.r.opts.Blobs == nil {
		return nil, true, fmt.Errorf("the message references blob %s, and this runtime has no blob store; run it with --blobs naming the store its senders put blobs in", ref.Key)
	}
	body, err = g.r.opts.Blobs.GetBlob(ctx, ref.Key)
	var missing *stores.MissingBlobError
	var corrupt *stores.CorruptBlobError
	switch {
	case errors.As(err, &missing), errors.As(err, &corrupt):
		return nil, true, err
	case err != nil:
		return nil, false, fmt.Errorf("get blob %s: %w", ref.Key, err)
	}
	return body, false, nil
}

// sameBytes reports whether a and b are the same non-empty slice of the
// same array: a publish that carries the restored body itself.
func sameBytes(a, b []byte) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

// claimChecked returns m as the runtime publishes it for a caller of the
// Go API (PublishAt, PublishIn): by claim check when its body is above its
// threshold (ownClaimCheckAbove) and the runtime has a blob store;
// unchanged otherwise.
func (r *Runtime) claimChecked(ctx context.Context, m decide.Message) (decide.Message, error) {
	return ownClaimCheck(ctx, r.opts.Blobs, r.plan, m)
}

// ownClaimCheck returns m, a message the runtime publishes of its own
// accord (PublishAt and PublishIn, a schedule's firing), as the claim check
// has it go on the wire (FLOW-FORMAT §6): its body put in blobs and a
// reference sent instead when the body is above pl's threshold for it
// (ownClaimCheckAbove); unchanged when it is not, or blobs is nil. m's
// headers are copied, never changed.
func ownClaimCheck(ctx context.Context, blobs stores.Blobs, pl *plan.Plan, m decide.Message) (decide.Message, error) {
	if blobs == nil || !decide.ShouldClaimCheck(len(m.Body), ownClaimCheckAbove(pl, m)) {
		return m, nil
	}
	key, err := blobs.PutBlob(ctx, m.Body)
	if err != nil {
		return m, fmt.Errorf("message %s for exchange %q, routing key %q: put its body (%d bytes) in the blob store: %w", m.MessageID, m.Exchange, m.RoutingKey, len(m.Body), err)
	}
	return decide.WithClaimCheck(m, decide.ClaimCheck{Key: key, Size: int64(len(m.Body)), ContentType: m.ContentType}), nil
}

// ownClaimCheckAbove returns the claim_check.above a message the runtime
// publishes of its own accord is measured against: the input threshold of
// the consumer its destination reaches (the queue its routing key names on
// the default exchange, or the one bound to its exchange with that key);
// else that of the type m.Type names in the plan's flows; else the
// defaults of the flow it comes from (x-acemq-origin: a schedule's flow);
// else the smallest of the flows' defaults, as a body sent whole above
// its consumer's threshold is what the claim check exists to prevent, and
// one sent by reference below it is still read whole.
func ownClaimCheckAbove(pl *plan.Plan, m decide.Message) int64 {
	queue := destinationQueue(pl, m)
	for i := range pl.Consumers {
		if c := &pl.Consumers[i]; queue != "" && c.Queue == queue {
			return c.ClaimCheck.Input
		}
	}
	flows := planFlows(pl)
	if m.Type != "" {
		for _, f := range flows {
			if f.Type(m.Type) != nil {
				return f.ClaimCheckAbove(m.Type)
			}
		}
	}
	origin := decide.HeaderText(m.Headers[plan.HeaderOrigin])
	var above int64
	for _, f := range flows {
		a := f.ClaimCheckAbove("")
		if origin != "" && f.Name == origin {
			return a
		}
		if above == 0 || a < above {
			above = a
		}
	}
	return above
}

// destinationQueue returns the queue of pl a message the runtime publishes
// of its own accord reaches: the one its routing key names on the default
// exchange, or the first bound to its exchange with that key; "" for none.
func destinationQueue(pl *plan.Plan, m decide.Message) string {
	if m.Exchange == "" {
		return m.RoutingKey
	}
	for _, b := range pl.Bindings {
		if b.Exchange == m.Exchange && b.RoutingKey == m.RoutingKey && b.Queue != "" {
			return b.Queue
		}
	}
	return ""
}
