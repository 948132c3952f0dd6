package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/internal/work"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/runtime/wire"
)

// DueOptions configure a Due consumer.
type DueOptions struct {
	// Ladder is the ladder the messages come from (its unit: 1 s but in
	// tests, see plan.Ladder).
	Ladder decide.Ladder
	// Prefetch is how many due messages are handled at once. Default 256.
	Prefetch int
	// DrainTimeout bounds how long Run waits, once ctx ends, for the
	// messages in hand to be settled. Default 30s.
	DrainTimeout time.Duration
	// Name prefixes the consumer tag. Default "acemq-flow".
	Name string
	// Metrics is where the consumer's metrics are registered; nil keeps
	// them unregistered.
	Metrics prometheus.Registerer
	// Log receives the warnings about unroutable messages; nil discards.
	Log *slog.Logger
	// Tracer makes a span of each due message processed and of each
	// publish (runtime/tracing); nil traces nothing. A message delivered
	// out of the ladder keeps its creation context and gets its delivery
	// as its link: the step that gets it links across the delay.
	Tracer *tracing.Tracer
}

// How long an answer about an exchange a due message goes to is trusted:
// found, and missing.
const (
	trustFound   = 5 * time.Second
	trustMissing = time.Second
)

// Due consumes `acemq.schedule.due` and carries out decide.Ladder.Due for
// each message: delivered to its destination (published with confirms and
// mandatory, acknowledged once confirmed), held until due when it came
// early, or back into the ladder; a message that reached no queue
// (decide.Ladder.Unroutable) goes back for 10 s, logged and counted, and a
// message that names no destination goes to `.due`'s .dlq. A message is
// acknowledged only once what replaces it is confirmed; when that fails it
// goes back to `.due` (requeued), so nothing is lost.
//
// Lifecycle: NewDue allocates and registers the metrics; Run consumes until
// ctx ends or Close is called, then drains. Run may be called once.
type Due struct {
	consume, publish *broker.Conn
	opts             DueOptions
	log              *slog.Logger

	pub       *broker.Publisher
	exchanges *broker.ExchangeCache
	bg        work.Work
	closed    chan struct{} // closed by Close: Run drains
	closeOnce sync.Once

	delivered    prometheus.Counter
	lateness     prometheus.Observer
	unroutable   *prometheus.CounterVec
	deadLettered prometheus.Counter
}

// NewDue returns a consumer of `.due` that consumes on consume and
// publishes on publish (a connection no consumer uses; see
// broker.Publisher). It does no I/O. The connections stay the caller's.
func NewDue(consume, publish *broker.Conn, opts DueOptions) (*Due, error) {
	if opts.Prefetch <= 0 {
		opts.Prefetch = 256
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	if opts.Name == "" {
		opts.Name = "acemq-flow"
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	d := &Due{consume: consume, publish: publish, opts: opts, log: opts.Log.With("queue", plan.DueQueue), closed: make(chan struct{})}
	delivered := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "acemq_delay_delivered_total",
		Help: "Delayed messages taken from acemq.schedule.due and delivered to their destination.",
	})
	lateness := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "acemq_delay_lateness_seconds",
		Help:    "How late each delayed message was delivered: from its x-acemq-due-at to its publish to the destination.",
		Buckets: []float64{.05, .1, .25, .5, .75, 1, 1.5, 2, 5, 10, 30, 60},
	})
	unroutable := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "acemq_delay_unroutable_total",
		Help: "Times a due message reached no queue at its destination exchange (nothing bound, or the exchange missing) and went back into the ladder for 10 s.",
	}, []string{"exchange"})
	deadLettered := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "acemq_delay_dead_lettered_total",
		Help: "Messages taken from acemq.schedule.due that named no destination, sent to acemq.schedule.due.dlq.",
	})
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{delivered, lateness, unroutable, deadLettered} {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("register the delay ladder's metrics: %w", err)
			}
		}
	}
	d.delivered, d.lateness, d.unroutable, d.deadLettered = delivered, lateness, unroutable, deadLettered
	return d, nil
}

// Run consumes `.due` until ctx ends or Close is called, then drains: no
// new deliveries, the messages in hand settled up to the drain timeout
// (those held until due go back to `.due`). It returns nil after a clean
// shutdown.
func (d *Due) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-d.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	pub, err := broker.OpenPublisher(ctx, d.publish, broker.PublisherOptions{Log: d.opts.Log, Window: 512})
	if err != nil {
		return fmt.Errorf("%s consumer: open a publisher: %w", plan.DueQueue, err)
	}
	defer pub.Close()
	topo := broker.NewTopology(d.publish, d.opts.Log)
	defer topo.Close()
	d.pub = pub
	d.exchanges = broker.NewExchangeCache(topo.ExchangeExists, trustFound, trustMissing)
	bc := broker.NewConsumer(d.consume, broker.ConsumerOptions{Queue: plan.DueQueue, Tag: d.opts.Name + "-due", Prefetch: d.opts.Prefetch,
		Concurrency: 4, DrainTimeout: d.opts.DrainTimeout, Log: d.opts.Log})
	err = bc.Run(ctx, d.handle)
	d.bg.Wait()
	var de *broker.DrainError
	switch {
	case errors.As(err, &de):
		d.log.Warn("delay ladder's due consumer drained with messages still in hand after the drain timeout; they will be redelivered", "left_for_redelivery", de.Left)
	case err != nil && !errors.Is(err, broker.ErrClosed):
		return fmt.Errorf("%s consumer: %w", plan.DueQueue, err)
	default:
		d.log.Info("delay ladder's due consumer drained")
	}
	return nil
}

// Close makes Run drain and return; it does not wait for it. It is
// idempotent and may be called before Run (which then returns at once).
func (d *Due) Close() error {
	d.closeOnce.Do(func() { close(d.closed) })
	return nil
}

// handle carries out the decision about one due message.
func (d *Due) handle(ctx context.Context, bd *broker.Delivery) {
	if t := d.opts.Tracer; t != nil {
		var span trace.Span
		ctx, span = t.Process(ctx, tracing.Delivery{Queue: plan.DueQueue, Exchange: bd.Exchange, RoutingKey: bd.RoutingKey,
			MessageID: bd.MessageId, CorrelationID: bd.CorrelationId, DeliveryTag: bd.DeliveryTag, BodySize: len(bd.Body), Headers: bd.Headers})
		defer span.End()
	}
	dec := d.opts.Ladder.Due(wire.Message(&bd.Delivery), time.Now())
	switch dec.Action {
	case decide.DueWait:
		// Held until due, never early; given back to `.due` if the
		// consumer drains first.
		d.bg.Go(func() {
			t := time.NewTimer(dec.Wait)
			defer t.Stop()
			select {
			case <-t.C:
				d.deliver(ctx, bd, dec.Publish)
			case <-ctx.Done():
				_ = bd.Nack(true)
			}
		})
	case decide.DueDeliver:
		d.deliver(ctx, bd, dec.Publish)
	case decide.DueDelay:
		d.publishThenAck(ctx, bd, dec.Publish, nil)
	case decide.DueDeadLetter:
		d.log.Warn("delayed message names no destination; dead-lettered", "message_id", bd.MessageId, "error", dec.Reason)
		d.publishThenAck(ctx, bd, dec.Publish, d.deadLettered.Inc)
	}
}

// deliver publishes due message m to its destination and acknowledges it
// once confirmed; unroutable, it goes back into the ladder; nacked, it is
// published again after a wait (deliverAgain).
func (d *Due) deliver(ctx context.Context, bd *broker.Delivery, m decide.Message) {
	d.deliverTry(ctx, bd, m, 0)
}

// deliverTry is deliver's try after refused nacks of m's publish.
func (d *Due) deliverTry(ctx context.Context, bd *broker.Delivery, m decide.Message, refused int) {
	if m.Exchange != "" {
		// A publish to a missing exchange closes the publishing channel
		// (404), failing every publish in flight on it: the exchange is
		// asked about first, the answer kept briefly.
		if ok, err := d.exchanges.Exists(ctx, m.Exchange); err == nil && !ok {
			d.sendBack(ctx, bd, m, fmt.Sprintf("exchange %q does not exist", m.Exchange))
			return
		}
	}
	_, _, dueAt, _ := decide.Destination(m.Headers)
	err := d.publishFunc(ctx, m, func(err error) {
		switch {
		case err == nil:
			if !dueAt.IsZero() {
				d.lateness.Observe(max(time.Since(dueAt), 0).Seconds())
			}
			if bd.Ack() == nil {
				d.delivered.Inc()
			}
		case errors.Is(err, broker.ErrUnroutable):
			// Confirm callbacks must not publish.
			d.bg.Go(func() {
				d.sendBack(ctx, bd, m, fmt.Sprintf("no queue is bound to exchange %q for routing key %q", m.Exchange, m.RoutingKey))
			})
		case errors.Is(err, broker.ErrNacked):
			d.bg.Go(func() { d.deliverAgain(ctx, bd, m, refused+1, err) })
		case broker.ClosedNotFound(err):
			d.bg.Go(func() {
				d.exchanges.Forget()
				if ok, qerr := d.exchanges.Exists(ctx, m.Exchange); qerr == nil && !ok {
					d.sendBack(ctx, bd, m, fmt.Sprintf("exchange %q does not exist", m.Exchange))
					return
				}
				d.requeue(bd, m, err)
			})
		default:
			d.requeue(bd, m, err)
		}
	})
	if err != nil {
		d.notPublished(ctx, bd, m, err)
	}
}

// sendBack puts due message m, which its destination did not take, back
// into the ladder for 10 s (patterns.txt, "Scheduling": never
// dead-lettered; the seed's 0.7 releases sent it to a .dlq at once).
func (d *Due) sendBack(ctx context.Context, bd *broker.Delivery, m decide.Message, reason string) {
	back := d.opts.Ladder.Unroutable(m)
	retries, _ := decide.HeaderInt(back.Headers[plan.HeaderDueRetries])
	d.log.Warn("delayed message due but unroutable; back into the delay ladder",
		"exchange", m.Exchange, "routing_key", m.RoutingKey, "message_id", m.MessageID, "retries", retries,
		"retry_in", time.Duration(decide.UnroutableRetry)*d.unit(), "reason", reason)
	d.unroutable.WithLabelValues(m.Exchange).Inc()
	d.publishThenAck(ctx, bd, back, nil)
}

func (d *Due) unit() time.Duration {
	if d.opts.Ladder.Unit < time.Millisecond {
		return plan.LadderUnit
	}
	return d.opts.Ladder.Unit
}

// publishThenAck publishes m and acknowledges bd once m is confirmed and
// routed (then calls counted); otherwise bd goes back to `.due`.
func (d *Due) publishThenAck(ctx context.Context, bd *broker.Delivery, m decide.Message, counted func()) {
	err := d.publishFunc(ctx, m, func(err error) {
		if err != nil {
			d.requeue(bd, m, err)
			return
		}
		if bd.Ack() == nil && counted != nil {
			counted()
		}
	})
	if err != nil {
		d.notPublished(ctx, bd, m, err)
	}
}

// publishFunc publishes m, a due message republished as it is (to its
// destination, back into the ladder, or to `.due`'s .dlq), as a producer
// span when tracing; done as for broker.Publisher.PublishFunc.
func (d *Due) publishFunc(ctx context.Context, m decide.Message, done func(error)) error {
	msg := wire.Publishing(m)
	t := d.opts.Tracer
	if t == nil {
		return d.pub.PublishFunc(ctx, msg, done)
	}
	h, span := t.Publish(ctx, tracing.Publishing{Exchange: m.Exchange, RoutingKey: m.RoutingKey, MessageID: m.MessageID,
		CorrelationID: m.CorrelationID, BodySize: len(m.Body), Headers: m.Headers, Republish: true})
	msg.Headers = amqp.Table(h)
	err := d.pub.PublishFunc(ctx, msg, func(err error) {
		tracing.End(span, err, "")
		done(err)
	})
	if err != nil {
		tracing.End(span, err, "")
	}
	return err
}

// notPublished settles a delivery whose replacement could not even be
// written: one AMQP cannot carry goes to `.due`'s .dlq, as it would fail
// the same way every time; for anything else (ctx ended, the publisher
// closed) it goes back to `.due`.
func (d *Due) notPublished(ctx context.Context, bd *broker.Delivery, m decide.Message, err error) {
	if !errors.Is(err, broker.ErrInvalidMessage) || m.RoutingKey == plan.DeadLetterQueue(plan.DueQueue) {
		d.requeue(bd, m, err)
		return
	}
	dl := m
	dl.Headers = decide.Table{}
	for k, v := range m.Headers {
		dl.Headers[k] = v
	}
	dl.Headers[plan.HeaderError] = err.Error()
	dl.Headers[plan.HeaderErrorKind] = decide.KindFatal
	dl.Headers[plan.HeaderFailedQueue] = plan.DueQueue
	dl.Exchange, dl.RoutingKey = "", plan.DeadLetterQueue(plan.DueQueue)
	d.log.Warn("delayed message cannot be published; dead-lettered", "message_id", m.MessageID, "exchange", m.Exchange, "routing_key", m.RoutingKey, "error", err)
	d.publishThenAck(ctx, bd, dl, d.deadLettered.Inc)
}

// deliverAgain publishes m again once decide.RepublishBackoff has passed:
// the broker nacked its publish (a destination at its length limit that
// rejects publishes, an internal error in a queue), which says nothing
// about the message. bd is held meanwhile, unacknowledged: handed back to
// `.due` at once, it would come straight back, and `.due`, a quorum queue,
// would count each time against its delivery limit and dead-letter it. The
// first refusal is logged; when Run stops first, bd goes back to `.due`.
func (d *Due) deliverAgain(ctx context.Context, bd *broker.Delivery, m decide.Message, refused int, err error) {
	if refused == 1 {
		d.log.Warn("the broker refused a due message (basic.nack); it is published again after a wait", "message_id", m.MessageID,
			"exchange", m.Exchange, "routing_key", m.RoutingKey, "error", err)
	}
	wait := time.NewTimer(decide.RepublishBackoff(refused, rand.Float64()))
	defer wait.Stop()
	select {
	case <-wait.C:
		d.deliverTry(ctx, bd, m, refused)
	case <-ctx.Done():
		d.requeue(bd, m, err)
	}
}

// requeue hands bd back to `.due`: what should replace it was not
// confirmed, so it is tried again.
func (d *Due) requeue(bd *broker.Delivery, m decide.Message, err error) {
	d.log.Warn("delayed message handed back to the due queue: its publish failed", "message_id", m.MessageID,
		"exchange", m.Exchange, "routing_key", m.RoutingKey, "error", err)
	_ = bd.Nack(true)
}
