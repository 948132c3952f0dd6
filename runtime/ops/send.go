package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/runtime/wire"
)

// BlobPutter is what a send needs of the claim check's blob store
// (stores.Blobs): a body put under its key.
type BlobPutter interface {
	PutBlob(ctx context.Context, content []byte) (key string, err error)
}

// FirstClaimCheckAbove returns the claim-check threshold of the first
// message of a run sent to t (FLOW-FORMAT §6): the pipeline's, itinerary's
// or saga's input type's claim_check.above, else its file's defaults; for
// an exchange and routing key, or a target p does not have, the default
// (0, as decide.ShouldClaimCheck reads it).
func FirstClaimCheckAbove(p *plan.Plan, t decide.Target) int64 {
	switch {
	case t.Pipeline != "":
		if pl := p.Pipeline(t.Pipeline); pl != nil && pl.File != nil {
			return pl.File.ClaimCheckAbove(pl.Input)
		}
	case t.Itinerary != "":
		if it := p.Itinerary(t.Itinerary); it != nil && it.File != nil {
			return it.File.ClaimCheckAbove(it.Input)
		}
	case t.Saga != "":
		if s := p.Saga(t.Saga); s != nil && s.File != nil {
			return s.File.ClaimCheckAbove(s.Input)
		}
	}
	return 0
}

// ClaimCheck returns msg as it travels under threshold above: unchanged
// when its body is not larger, otherwise with the body put in blobs and
// the reference in its place (decide.WithClaimCheck). put is false when
// the body travels inline. A nil blobs with a body above the threshold is
// an error saying to give the runtime's blob store.
func ClaimCheck(ctx context.Context, blobs BlobPutter, msg decide.Message, above int64) (out decide.Message, put bool, err error) {
	if !decide.ShouldClaimCheck(len(msg.Body), above) {
		return msg, false, nil
	}
	if blobs == nil {
		return msg, false, fmt.Errorf("the payload is %d bytes, above the claim-check threshold of %d bytes, so it travels by claim check; give --blobs (or ACEMQ_BLOBS_URL) naming the blob store the runtime uses (file:DIR or postgres://…)",
			len(msg.Body), decide.ClaimCheckAbove(above))
	}
	key, err := blobs.PutBlob(ctx, msg.Body)
	if err != nil {
		return msg, false, fmt.Errorf("put the payload of %d bytes in the blob store: %w", len(msg.Body), err)
	}
	return decide.WithClaimCheck(msg, decide.ClaimCheck{Key: key, Size: int64(len(msg.Body)), ContentType: msg.ContentType}), true, nil
}

// Reply is what came back to a `send --wait`.
type Reply struct {
	Outcome   string // completed, stopped, dead-lettered
	Payload   []byte
	Headers   decide.Table
	StoppedAt string
	Error     string
	Slip      *decide.Itinerary // the run's slip, for an itinerary: how far it got
}

// Route renders the reply's slip for a person ("validate ✓ 14:03:11 →
// approve ✓ 14:03:12 → charge ✓ 14:03:12"), or "" without one.
func (r *Reply) Route() string {
	if r.Slip == nil {
		return ""
	}
	return r.Slip.Text()
}

// endSpan ends the span of a send's publish, when it has one.
func endSpan(span trace.Span, err error) {
	if span != nil {
		tracing.End(span, err, "")
	}
}

// ErrNoReply is returned by Send when no reply came within the wait.
var ErrNoReply = errors.New("no reply")

// sendOpTimeout bounds each of send's calls to the broker, closing the
// connection included: a broker that reads nothing (a resource alarm)
// answers none of them, and send should not outlast its wait by much.
const sendOpTimeout = 2 * time.Second

// sendConfirmTimeout bounds the wait for the broker's confirm of a send
// without --wait.
const sendConfirmTimeout = 30 * time.Second

// Send publishes msg on a connection of its own with the runtime's
// confirmed publisher and, when wait is positive, waits for the run's reply
// on a reply queue of its own (correlated by the run's id); wait bounds the
// whole, from the publish to the reply. It returns nil Reply when wait is
// zero.
func Send(ctx context.Context, url string, msg decide.Message, wait time.Duration) (*Reply, error) {
	return SendTraced(ctx, url, msg, wait, nil)
}

// SendTraced is Send with the publish a producer span of t
// (runtime/tracing), "publish <exchange>", a child of ctx's span or the
// root of a new trace (acemq-flow send's), ended at the broker's confirm:
// the message's creation context, so that its run is in that trace. A nil
// t traces nothing, as Send.
func SendTraced(ctx context.Context, url string, msg decide.Message, wait time.Duration, t *tracing.Tracer) (*Reply, error) {
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := broker.Open(dctx, url, broker.ConnOptions{Name: "acemq-flow send", OpTimeout: sendOpTimeout})
	if err != nil {
		return nil, fmt.Errorf("connect to the broker: %w", err)
	}
	defer conn.Close()
	var replies *replyWaiter
	if wait > 0 {
		// Waiting before publishing: a run may end before the publish's
		// confirm comes back.
		if replies, err = waitForReplies(dctx, conn); err != nil {
			return nil, err
		}
		defer replies.close()
		msg.ReplyTo = replies.queue
	}
	// Its one publish has an outcome, or has had its wait, by the time it
	// closes: nothing is worth waiting for then.
	pub, err := broker.OpenPublisher(dctx, conn, broker.PublisherOptions{CloseTimeout: 100 * time.Millisecond})
	if err != nil {
		return nil, fmt.Errorf("open a publisher: %w", err)
	}
	defer pub.Close()
	// The wait runs from the publish: a broker that does not confirm (a
	// resource alarm blocks publishers) must not hold send past it.
	limit := wait
	if limit <= 0 {
		limit = sendConfirmTimeout
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	pctx, pcancel := context.WithTimeout(ctx, limit)
	defer pcancel()
	var span trace.Span
	if t != nil {
		var h map[string]any
		h, span = t.Publish(ctx, tracing.Publishing{Exchange: msg.Exchange, RoutingKey: msg.RoutingKey, MessageID: msg.MessageID,
			CorrelationID: msg.CorrelationID, BodySize: len(msg.Body), Headers: msg.Headers})
		msg.Headers = decide.Table(h)
	}
	pending, err := pub.PublishAsync(pctx, wire.Publishing(msg))
	if err != nil {
		endSpan(span, err)
		// Nothing was published.
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, sendError(msg, limit, err)
	}
	err = pending.Wait(pctx)
	endSpan(span, err)
	if err != nil {
		if ctx.Err() != nil {
			// The message went out: say which, so that it can be followed.
			return nil, fmt.Errorf("message %s was sent, and the wait for the broker's confirm was interrupted (it may yet be delivered): %w", msg.MessageID, ctx.Err())
		}
		return nil, sendError(msg, limit, err)
	}
	if replies == nil {
		return nil, nil
	}
	for {
		select {
		case d, ok := <-replies.deliveries:
			if !ok {
				return nil, errors.New("the reply queue's consumer was cancelled before the reply came")
			}
			if d.CorrelationId != msg.CorrelationID {
				continue
			}
			h := decide.Table(d.Headers)
			r := &Reply{Outcome: decide.HeaderText(h[plan.HeaderOutcome]), Payload: d.Body, Headers: h,
				StoppedAt: decide.HeaderText(h[plan.HeaderStoppedAt]), Error: decide.HeaderText(h[plan.HeaderError])}
			if raw := decide.HeaderText(h[plan.HeaderSlip]); raw != "" {
				if it, err := decide.ParseItinerary([]byte(raw)); err == nil {
					r.Slip = &it
				}
			}
			return r, nil
		case <-timer.C:
			return nil, fmt.Errorf("%w within %s for message %s", ErrNoReply, wait, msg.MessageID)
		case <-ctx.Done():
			// The message went out: say which, so that it can be followed.
			return nil, fmt.Errorf("message %s was sent, and the wait for its reply was interrupted: %w", msg.MessageID, ctx.Err())
		}
	}
}

// sendError words a publish that failed, for a person at a terminal.
func sendError(msg decide.Message, limit time.Duration, err error) error {
	if _, _, _, delayed := decide.Destination(msg.Headers); delayed && (broker.ClosedNotFound(err) || errors.Is(err, broker.ErrUnroutable)) {
		// Into the ladder: it is the ladder that is missing, not the
		// destination.
		return fmt.Errorf("the delay ladder (%s, %s) is not declared on this broker; start a runtime (`acemq-flow run` declares it and delivers what is due), then send again",
			msg.Exchange, plan.DueQueue)
	}
	switch {
	case broker.ClosedNotFound(err):
		// Its one publish was alone on the channel the broker closed.
		return fmt.Errorf("exchange %q does not exist on the broker; run the flows that declare it (`acemq-flow run`), or correct the name", msg.Exchange)
	case errors.Is(err, broker.ErrUnroutable):
		return fmt.Errorf("%w: exchange %q has no queue bound for key %q; is the runtime running with these flows?", broker.ErrUnroutable, msg.Exchange, msg.RoutingKey)
	case errors.Is(err, broker.ErrNacked):
		return fmt.Errorf("the broker refused the message (nack) on %q with key %q", msg.Exchange, msg.RoutingKey)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: the broker did not confirm message %s to %q with key %q within %s (a resource alarm blocks publishers until it clears); it may yet be delivered",
			broker.ErrIndeterminate, msg.MessageID, msg.Exchange, msg.RoutingKey, limit)
	}
	return fmt.Errorf("publish to %q with key %q: %w", msg.Exchange, msg.RoutingKey, err)
}

// replyWaiter consumes the replies to one send: an exclusive queue the
// broker names, deleted with the connection.
type replyWaiter struct {
	ch         *amqp.Channel
	queue      string
	deliveries <-chan amqp.Delivery
}

func waitForReplies(ctx context.Context, conn *broker.Conn) (*replyWaiter, error) {
	ch, err := conn.Channel(ctx)
	if err != nil {
		return nil, fmt.Errorf("open a channel for the reply: %w", err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("declare a queue for the reply: %w", err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("consume the reply queue %q: %w", q.Name, err)
	}
	return &replyWaiter{ch: ch, queue: q.Name, deliveries: deliveries}, nil
}

// close closes the waiter's channel, giving up after a second: a broker
// that reads nothing (a resource alarm) never answers the close, and
// closing the connection next ends it.
func (w *replyWaiter) close() {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = w.ch.Close()
	}()
	select {
	case <-closed:
	case <-time.After(time.Second):
	}
}
