package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/runtime/wire"
)

// DefaultMaxReplays is how many times `replay` moves a message back before
// it parks it instead (FLOW-FORMAT §3, `--max-replays`).
const DefaultMaxReplays = 3

// replayConfirmTimeout bounds the wait for one publish's confirm. It does not
// follow the caller's context: a replay interrupted while a publish is in
// flight still learns its outcome, and settles the source message by it.
const replayConfirmTimeout = 30 * time.Second

// ReplayOptions says what Replay moves, and where.
type ReplayOptions struct {
	// From is the queue to replay from: `<queue>.dlq`, or `<queue>.parked`.
	From string
	// To is the queue every message goes back to. Empty: the queue each
	// message failed on (its x-acemq-failed-queue header, else From without
	// its .dlq or .parked suffix).
	To string
	// Limit is the most messages to handle; 0 handles every message counted
	// in From when Replay starts (never the ones arriving later, nor the ones
	// it puts back itself).
	Limit int
	// MaxReplays: a message whose replay count would exceed it goes to
	// `<queue>.parked` instead of back. 0 or less means DefaultMaxReplays.
	MaxReplays int
	// DryRun reads the messages, reports in Summary.Actions what would
	// happen to each, and puts them all back, in their order. It holds every
	// message it reads until the end; Limit bounds that. On a quorum queue
	// each message read counts one delivery (see Inspect).
	DryRun bool
	// Progress, when set, is called after each message with how many are
	// handled and how many Replay means to handle, from the calling goroutine.
	Progress func(done, total int)
	// Log receives a warning for each message parked; nil discards it.
	Log *slog.Logger
	// Tracer makes a producer span of each message moved
	// (runtime/tracing): in the message's trace, linked to the span that
	// dead-lettered it, and the next delivery's link; nil traces nothing
	// (the message's trace context travels on unchanged either way).
	Tracer *tracing.Tracer
}

// ReplayAction is what happened, or in a dry run would happen, to one
// message.
type ReplayAction struct {
	MessageID string `json:"message_id"`
	// Queue is where the message goes: the queue it is replayed to, or the
	// parked queue. Empty when it stays in From.
	Queue string `json:"queue,omitempty"`
	// Parked is true when the message goes to the parked queue.
	Parked bool `json:"parked,omitempty"`
	// Replays is the message's replay count after the move (unchanged when
	// parked or left).
	Replays int `json:"replays"`
	// Left says why the message stays in From, when it does.
	Left string `json:"left,omitempty"`
}

// ReplaySummary is the outcome of Replay.
type ReplaySummary struct {
	From string `json:"from"`
	// Total is how many messages Replay meant to handle: those in From when
	// it started, capped by Limit.
	Total int `json:"total"`
	// Moved and Parked count the messages published (confirmed and routed)
	// and then acknowledged on From. A dry run moves and parks nothing.
	Moved  int `json:"moved"`
	Parked int `json:"parked"`
	// Skipped counts the messages looked at and put back in From: all of
	// them in a dry run.
	Skipped int `json:"skipped"`
	// Left is how many of the messages counted at the start are still in
	// From.
	Left int `json:"left"`
	// MovedTo and ParkedIn count the messages by the queue they went to.
	MovedTo  map[string]int `json:"moved_to,omitempty"`
	ParkedIn map[string]int `json:"parked_in,omitempty"`
	// Actions lists, in a dry run, what would happen to each message; in a
	// real run, only the messages left in From and why.
	Actions []ReplayAction `json:"actions,omitempty"`
}

// Replay moves the messages of a dead-letter (or parked) queue back to the
// queue they failed on, or to opts.To (FLOW-FORMAT §3, `replay`). Each
// message is published through the default exchange, routing key the target
// queue, with its envelope unchanged — the same message id, so idempotency
// still recognises it — except that x-acemq-attempt is 1 again,
// x-acemq-replays is one more, and the x-acemq-error* and x-acemq-failed-*
// headers are gone. A message whose replay count would exceed MaxReplays goes
// to `<queue>.parked` instead, exactly as it was. When From is itself a parked
// queue, such a message stays where it is.
//
// Delivery is at least once: a message is acknowledged on From only after the
// broker confirmed its publish and routed it to a queue. If a publish fails
// (the target queue does not exist, the broker refuses it), that message is
// put back in From and Replay stops with an error naming the queue and the
// message id. A message whose target cannot be told is put back too, and
// Replay goes on with the next; every such problem is in the returned error.
// Replay handles at most the number of messages From held when it started,
// so it never meets the ones it moved itself.
//
// Replay opens its own connections to url and closes them before it returns.
// The summary is valid even when the error is not nil.
func Replay(ctx context.Context, url string, opts ReplayOptions) (ReplaySummary, error) {
	sum := ReplaySummary{From: opts.From, MovedTo: map[string]int{}, ParkedIn: map[string]int{}}
	if opts.From == "" {
		return sum, errors.New("replay: name the queue to replay from")
	}
	if opts.To == opts.From {
		return sum, fmt.Errorf("replay from queue %q to itself would meet its own messages again; name another queue", opts.From)
	}
	if opts.Limit < 0 {
		return sum, fmt.Errorf("replay from queue %q: the limit must not be negative, not %d", opts.From, opts.Limit)
	}
	if opts.MaxReplays <= 0 {
		opts.MaxReplays = DefaultMaxReplays
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	log := opts.Log.With("queue", opts.From)

	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	// Two connections: under a resource alarm the broker blocks a
	// connection that publishes, and the acknowledgements on From must still
	// get through.
	conn, err := broker.Open(octx, url, broker.ConnOptions{Name: "acemq-flow replay"})
	if err != nil {
		return sum, fmt.Errorf("replay from queue %q: connect to the broker: %w", opts.From, err)
	}
	defer conn.Close()
	top := broker.NewTopology(conn, opts.Log)
	defer top.Close()

	depth, err := top.Depth(ctx, opts.From)
	if err != nil {
		return sum, queueError("replay from", opts.From, err)
	}
	sum.Total = depth
	if opts.Limit > 0 && opts.Limit < depth {
		sum.Total = opts.Limit
	}
	sum.Left = depth
	if sum.Total == 0 {
		return sum, nil
	}

	var pub *broker.Publisher
	if !opts.DryRun {
		pconn, err := broker.Open(octx, url, broker.ConnOptions{Name: "acemq-flow replay publish"})
		if err != nil {
			return sum, fmt.Errorf("replay from queue %q: connect to the broker: %w", opts.From, err)
		}
		defer pconn.Close()
		pub, err = broker.OpenPublisher(octx, pconn, broker.PublisherOptions{Log: opts.Log})
		if err != nil {
			return sum, fmt.Errorf("replay from queue %q: %w", opts.From, err)
		}
		defer pub.Close()
	}

	r := &replayer{opts: opts, top: top, pub: pub, log: log, sum: &sum, exists: map[string]error{}}
	err = r.run(ctx)
	sum.Left = depth - sum.Moved - sum.Parked
	return sum, err
}

type replayer struct {
	opts   ReplayOptions
	top    *broker.Topology
	pub    *broker.Publisher
	log    *slog.Logger
	sum    *ReplaySummary
	held   []*broker.Delivery // looked at, put back in From at the end
	exists map[string]error   // target queue → nil, or why it cannot be used
	errs   []error
}

func (r *replayer) run(ctx context.Context) error {
	// Whatever happens, the messages held are put back, in the order they
	// were taken; a classic queue puts them back where they were.
	defer func() {
		for _, d := range r.held {
			_ = d.Nack(true) // a failed nack means a closed channel: the broker requeues it too
		}
	}()
	for done := 0; done < r.sum.Total; done++ {
		if err := ctx.Err(); err != nil {
			r.errs = append(r.errs, fmt.Errorf("replay from queue %q stopped after %d of %d message(s): %w", r.opts.From, done, r.sum.Total, err))
			break
		}
		d, err := r.top.Get(ctx, r.opts.From)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("replay: %w", err))
			break
		}
		if d == nil {
			break // emptied by someone else meanwhile
		}
		stop := r.one(ctx, d)
		if r.opts.Progress != nil {
			r.opts.Progress(done+1, r.sum.Total)
		}
		if stop {
			break
		}
	}
	return errors.Join(r.errs...)
}

// one handles one message; it reports whether Replay must stop.
func (r *replayer) one(ctx context.Context, d *broker.Delivery) bool {
	env := decide.ReadEnvelope(wire.Message(&d.Delivery))
	id := env.MessageID
	act := ReplayAction{MessageID: id, Replays: env.Replays}
	failedQueue := failedQueueOf(r.opts.From, env)
	target := r.opts.To
	if target == "" {
		target = failedQueue
	}
	if failedQueue == "" {
		failedQueue = target
	}
	switch {
	case target == "":
		return r.leave(d, act, fmt.Errorf("message %q in queue %q has no %s header and the queue name does not end in %q or %q; name the queue to replay it to",
			id, r.opts.From, plan.HeaderFailedQueue, plan.DeadLetterQueue(""), plan.ParkedQueue("")), "no queue to replay it to")
	case target == r.opts.From:
		// Its failed queue is the one it is in (moved back by hand, say):
		// replayed, it would lose its reason and go round again.
		return r.leave(d, act, fmt.Errorf("message %q in queue %q names that queue in its %s header; name the queue to replay it to with --to",
			id, r.opts.From, plan.HeaderFailedQueue), "it would go back to the queue it is in")
	case env.Replays+1 > r.opts.MaxReplays && isParked(r.opts.From, failedQueue):
		act.Left = fmt.Sprintf("replayed %d time(s), the limit is %d; raise --max-replays to replay it again", env.Replays, r.opts.MaxReplays)
		return r.leave(d, act, nil, "")
	case env.Replays+1 > r.opts.MaxReplays:
		act.Queue, act.Parked = plan.ParkedQueue(failedQueue), true
	default:
		act.Queue, act.Replays = target, env.Replays+1
	}

	if err := r.usable(ctx, act.Queue); err != nil {
		if r.opts.DryRun {
			act.Left = err.Error()
			return r.leave(d, act, nil, "")
		}
		r.held = append(r.held, d)
		r.sum.Skipped++
		r.errs = append(r.errs, fmt.Errorf("replay message %q from queue %q: %w; the message stays in %q", id, r.opts.From, err, r.opts.From))
		return true
	}
	if r.opts.DryRun {
		r.held = append(r.held, d)
		r.sum.Skipped++
		r.sum.Actions = append(r.sum.Actions, act)
		return false
	}

	m := wire.Message(&d.Delivery)
	if act.Parked {
		m = decide.ReplayParked(m, act.Queue)
	} else {
		m = decide.Replayed(m, act.Queue, act.Replays)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replayConfirmTimeout)
	defer cancel()
	var span trace.Span
	if t := r.opts.Tracer; t != nil {
		var h map[string]any
		h, span = t.Publish(pctx, tracing.Publishing{Exchange: m.Exchange, RoutingKey: m.RoutingKey, MessageID: m.MessageID,
			CorrelationID: m.CorrelationID, BodySize: len(m.Body), Headers: m.Headers, Republish: true})
		m.Headers = decide.Table(h)
	}
	err := r.pub.Publish(pctx, wire.Publishing(m))
	if span != nil {
		tracing.End(span, err, "")
	}
	if err != nil {
		// Not stored anywhere, or maybe stored: either way the message stays
		// in From, and a duplicate is what idempotency is for.
		_ = d.Nack(true)
		r.errs = append(r.errs, fmt.Errorf("replay message %q from queue %q to queue %q: %w; the message stays in %q", id, r.opts.From, act.Queue, err, r.opts.From))
		return true
	}
	if err := d.Ack(); err != nil {
		r.errs = append(r.errs, fmt.Errorf("message %q was published to queue %q but its acknowledgement on queue %q failed (%w); it is in both queues now", id, act.Queue, r.opts.From, err))
		return true
	}
	if act.Parked {
		r.sum.Parked++
		r.sum.ParkedIn[act.Queue]++
		r.log.Warn("message parked", "message_id", id, "replays", env.Replays, "parked_queue", act.Queue)
	} else {
		r.sum.Moved++
		r.sum.MovedTo[act.Queue]++
		r.log.Debug("message replayed", "message_id", id, "replays", act.Replays, "to_queue", act.Queue)
	}
	return false
}

// leave holds d, to put it back in From at the end, and records why.
func (r *replayer) leave(d *broker.Delivery, act ReplayAction, err error, why string) bool {
	r.held = append(r.held, d)
	r.sum.Skipped++
	if act.Left == "" {
		act.Left = why
	}
	act.Queue, act.Parked = "", false
	r.sum.Actions = append(r.sum.Actions, act)
	if err != nil && !r.opts.DryRun {
		r.errs = append(r.errs, err)
	}
	return false
}

// usable checks once per run that queue exists, so a replay to a missing
// queue says so instead of reporting an unroutable message.
func (r *replayer) usable(ctx context.Context, queue string) error {
	if err, ok := r.exists[queue]; ok {
		return err
	}
	_, err := r.top.Inspect(ctx, queue)
	if errors.Is(err, broker.ErrNotFound) {
		err = fmt.Errorf("queue %q does not exist", queue)
	}
	r.exists[queue] = err
	return err
}

// failedQueueOf is the queue a dead-lettered message failed on: its
// x-acemq-failed-queue header, else the queue it is in without the .dlq or
// .parked suffix, else "".
func failedQueueOf(from string, env decide.Envelope) string {
	if q := decide.HeaderText(env.Headers[plan.HeaderFailedQueue]); q != "" {
		return q
	}
	if q, ok := strings.CutSuffix(from, plan.DeadLetterQueue("")); ok && q != "" {
		return q
	}
	if q, ok := strings.CutSuffix(from, plan.ParkedQueue("")); ok && q != "" {
		return q
	}
	return ""
}

func isParked(from, failedQueue string) bool {
	return from == plan.ParkedQueue(failedQueue) || strings.HasSuffix(from, plan.ParkedQueue(""))
}

// queueError words a failure to read queue, naming a missing one plainly.
func queueError(what, queue string, err error) error {
	if errors.Is(err, broker.ErrNotFound) {
		return fmt.Errorf("%s queue %q: the queue does not exist", what, queue)
	}
	return fmt.Errorf("%s queue %q: %w", what, queue, err)
}
