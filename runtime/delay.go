package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/runtime/wire"
)

// ErrNotRunning is returned by PublishAt and PublishIn before Run has
// started the runtime, and once it has begun to drain.
var ErrNotRunning = errors.New("the runtime is not running")

// PublishAt publishes m so that it is delivered to m.Exchange with
// m.RoutingKey at at: through the delay ladder (FLOW-FORMAT §4), with the
// destination and due time in its headers, never early and, on the real
// 1 s ladder, about a second late at most. It returns once the broker has
// confirmed the message into the ladder; from then on the `.due` consumer
// of any runtime that declares the ladder (every `acemq-flow run`; this one
// when the plan has a step delay or Options.Delays is set) delivers it, and
// a destination that takes nothing yet is tried again every 10 s until it
// does. A time at or before now is delivered as soon as `.due` is consumed.
// A JSON body for an Avro type (the input type of the consumer the
// destination reaches, else the type m.Type names) is encoded as Avro with
// the type's registry id, as `send` encodes it (FLOW-FORMAT §6); one that
// does not fit the type is refused with an error naming it. A body above
// the claim_check.above of the consumer the destination reaches (else of
// the type m.Type names, else the flows' smallest default) is put in the
// runtime's blob store (Options.Blobs) and travels, through the ladder
// too, as a reference: the consumer's claim check fetches it whole.
// A delay beyond the ladder's 2^28 - 1 s gives an error wrapping
// decide.ErrDelayTooLong. m is not changed. It is safe for concurrent use
// while Run runs; before that, and once Run drains, it returns
// ErrNotRunning.
func (r *Runtime) PublishAt(ctx context.Context, m decide.Message, at time.Time) error {
	if !r.ready.Load() || r.draining() {
		return ErrNotRunning
	}
	if m.MessageID == "" {
		m.MessageID = decide.NewMessageID()
	}
	if m.DeliveryMode == 0 {
		m.DeliveryMode = decide.Persistent
	}
	m, err := r.encodeOwn(ctx, m)
	if err != nil {
		return err
	}
	if m, err = r.claimChecked(ctx, m); err != nil {
		return err
	}
	ladder := decide.Ladder{Unit: r.opts.LadderUnit}
	if _, _, err := ladder.Delay(&m, m.Exchange, m.RoutingKey, at, time.Now()); err != nil {
		return err
	}
	// A runtime that does not declare the ladder publishes into it beside
	// its own publishes: a ladder nobody declared is a 404 that closes the
	// channel (destinations.go).
	span := r.tracePublish(ctx, &m)
	err = r.publisherFor(m.Exchange).Publish(ctx, wire.Publishing(m))
	if span != nil {
		tracing.End(span, err, publishErrorKind(err))
	}
	if err != nil {
		return fmt.Errorf("publish message %s into the delay ladder (for exchange %q, routing key %q): %w",
			m.MessageID, decide.HeaderText(m.Headers[plan.HeaderDeliverExchange]), decide.HeaderText(m.Headers[plan.HeaderDeliverRoutingKey]), err)
	}
	return nil
}

// PublishIn is PublishAt for a delay from now.
func (r *Runtime) PublishIn(ctx context.Context, m decide.Message, d time.Duration) error {
	return r.PublishAt(ctx, m, time.Now().Add(d))
}
