package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Exchange is an exchange declaration.
type Exchange struct {
	Name       string
	Kind       string // direct, topic, fanout, headers
	Durable    bool
	AutoDelete bool
	Internal   bool
	Args       map[string]any // typed as Args describes
}

// Queue is a queue declaration. The queue type goes in Args as
// "x-queue-type" ("quorum", "classic", "stream").
type Queue struct {
	Name       string
	Durable    bool
	AutoDelete bool
	Exclusive  bool
	Args       map[string]any // typed as Args describes
	// Unconsumed marks a queue nothing consumes, only publishes to (a .dlq,
	// a .parked): found on a node that is down, it is taken as it is (it
	// exists, and holds its messages), logged as a warning, and checks of
	// it and bindings to it pass while the node is away, so that a runtime
	// can start on the other nodes of a cluster. Anything published to it
	// meanwhile is returned unroutable, which its publisher handles.
	Unconsumed bool
}

// Binding binds a queue to an exchange with a routing key, or, when
// ToExchange is set (and Queue empty), the exchange ToExchange to Exchange
// (exchange.bind: what Exchange routes with the key goes on to ToExchange).
type Binding struct {
	Queue      string
	ToExchange string
	Exchange   string
	RoutingKey string
	Args       map[string]any
}

// QueueInfo is what a passive declare reports about a queue.
type QueueInfo struct {
	Name      string
	Messages  int // ready messages (not those delivered and unacknowledged)
	Consumers int
}

// Args converts declaration arguments to the AMQP types the broker expects:
// every integer (any width, signed or not) and every whole float becomes an
// int64, so x-message-ttl 60000 is a number and never a string or a float the
// broker refuses; bools, strings and nested tables are kept. A value it
// cannot send is an error naming the argument.
func Args(in map[string]any) (amqp.Table, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(amqp.Table, len(in))
	for k, v := range in {
		tv, err := argValue(v)
		if err != nil {
			return nil, fmt.Errorf("argument %q: %w", k, err)
		}
		out[k] = tv
	}
	return out, nil
}

func argValue(v any) (any, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint:
		return uintArg(uint64(x))
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		return uintArg(x)
	case float32:
		return floatArg(float64(x))
	case float64:
		return floatArg(x)
	case bool, string, nil:
		return x, nil
	case map[string]any:
		return Args(x)
	case amqp.Table:
		return Args(x)
	}
	return nil, fmt.Errorf("value %v of type %T cannot be sent to the broker", v, v)
}

func uintArg(u uint64) (any, error) {
	if u > math.MaxInt64 {
		return nil, fmt.Errorf("value %d is out of range", u)
	}
	return int64(u), nil
}

func floatArg(f float64) (any, error) {
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return int64(f), nil
	}
	return f, nil
}

// Topology declares and checks exchanges, queues and bindings, and reads
// queues for inspection and replay. Declarations share one channel, reopened
// after a refusal closes it; checks use a throwaway channel each, since a
// failed declare closes its channel, and read the management API of the
// Conn (ConnOptions.Management) where AMQP cannot tell. A Topology is safe for
// concurrent use; the caller closes it (the Conn stays open).
type Topology struct {
	conn *Conn
	log  *slog.Logger

	mu   sync.Mutex
	decl *amqp.Channel
	get  *consGen

	// away holds the Unconsumed queues found on a node that is down, by
	// name, with the node: taken as they are (Queue.Unconsumed).
	away sync.Map
}

// takeAway takes queue, found on node, which is down, as it is.
func (t *Topology) takeAway(queue, node string) {
	if _, seen := t.away.Swap(queue, node); !seen {
		t.log.Warn("queue's home node is down; it is taken as it is, and what is published to it waits until the node is back",
			"queue", queue, "node", node)
	}
}

// Unconsumed is err, a failure met asking about queue, unless err says
// that queue, which nothing consumes, exists on a node that is down: then
// nil, the queue taken as it is (Queue.Unconsumed).
func (t *Topology) Unconsumed(queue string, err error) error {
	node, down := homeNodeDown(err)
	if !down {
		return err
	}
	t.takeAway(queue, node)
	return nil
}

// isAway reports whether queue was taken as it is, its node down, and the
// broker's err says the node still is.
func (t *Topology) isAway(queue string, err error) bool {
	if _, ok := homeNodeDown(err); !ok {
		return false
	}
	_, ok := t.away.Load(queue)
	return ok
}

// NewTopology returns a Topology working on conn. It does no I/O.
func NewTopology(conn *Conn, log *slog.Logger) *Topology {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Topology{conn: conn, log: log.With("connection", conn.Name())}
}

// Close closes the Topology's channels. Deliveries from Get that are not
// settled yet become stale (the broker requeues them). It is idempotent.
func (t *Topology) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.decl != nil {
		_ = t.conn.call(context.Background(), "close channel", t.decl.Close)
		t.decl = nil
	}
	if t.get != nil {
		t.get.dead.Store(true)
		_ = t.conn.call(context.Background(), "close channel", t.get.ch.Close)
		t.get = nil
	}
	return nil
}

func (t *Topology) declChannel(ctx context.Context) (*amqp.Channel, error) {
	if t.decl != nil && !t.decl.IsClosed() {
		return t.decl, nil
	}
	ch, err := t.conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	t.decl = ch
	return ch, nil
}

// DeclareExchange declares x, creating it when missing. An exchange that
// exists with other settings gives a *DriftError naming every setting that
// differs (see Topology.Check for how they are read).
func (t *Topology) DeclareExchange(ctx context.Context, x Exchange) error {
	args, err := Args(x.Args)
	if err != nil {
		return fmt.Errorf("declare exchange %q: %w", x.Name, err)
	}
	err = t.declare(ctx, fmt.Sprintf("declare exchange %q", x.Name), func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(x.Name, x.Kind, x.Durable, x.AutoDelete, x.Internal, false, args)
	})
	if err != nil {
		return t.declareFailed(ctx, "exchange", x.Name, err, func(c *checker) (*Difference, error) {
			return c.exchangeDrift(ctx, x, args)
		})
	}
	t.log.Debug("exchange declared", "exchange", x.Name)
	return nil
}

// DeclareQueue declares q, creating it when missing. A queue that exists with
// another type or other arguments gives a *DriftError naming every setting
// that differs, the type first (see Topology.Check for how they are read).
func (t *Topology) DeclareQueue(ctx context.Context, q Queue) error {
	args, err := Args(q.Args)
	if err != nil {
		return fmt.Errorf("declare queue %q: %w", q.Name, err)
	}
	err = t.declare(ctx, fmt.Sprintf("declare queue %q", q.Name), func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(q.Name, q.Durable, q.AutoDelete, q.Exclusive, false, args)
		return err
	})
	if node, down := homeNodeDown(err); down && q.Unconsumed {
		t.takeAway(q.Name, node)
		return nil
	}
	if err != nil {
		return t.declareFailed(ctx, "queue", q.Name, err, func(c *checker) (*Difference, error) {
			return c.queueDrift(ctx, q, args)
		})
	}
	t.away.Delete(q.Name)
	t.log.Debug("queue declared", "queue", q.Name)
	return nil
}

// declare runs fn on the shared declaring channel.
func (t *Topology) declare(ctx context.Context, what string, fn func(ch *amqp.Channel) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch, err := t.declChannel(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return t.conn.call(ctx, what, func() error { return fn(ch) })
}

// declareFailed translates a refused declaration. The refusal names one
// setting; read (the management API, or further refusals) names the rest.
// When reading fails, the error names the one setting.
func (t *Topology) declareFailed(ctx context.Context, kind, name string, err error, read func(*checker) (*Difference, error)) error {
	err = declareError(kind, name, err)
	var de *DriftError
	if !errors.As(err, &de) {
		return err
	}
	d, rerr := read(&checker{t: t, m: t.conn.mgmtAPI()})
	if rerr != nil {
		t.log.Debug("drift not read beyond the refusal", kind, name, "error", rerr)
		return de
	}
	if d == nil {
		return de
	}
	for _, s := range de.Settings {
		if !slices.ContainsFunc(d.Settings, func(x Setting) bool { return x.Name == s.Name }) {
			d.Settings = sortSettings(append(d.Settings, s))
		}
	}
	de.Difference = *d
	return de
}

// Bind binds b.Queue (or exchange b.ToExchange) to b.Exchange with
// b.RoutingKey.
func (t *Topology) Bind(ctx context.Context, b Binding) error {
	args, err := Args(b.Args)
	what := fmt.Sprintf("bind queue %q to exchange %q with routing key %q", b.Queue, b.Exchange, b.RoutingKey)
	if b.ToExchange != "" {
		what = fmt.Sprintf("bind exchange %q to exchange %q with routing key %q", b.ToExchange, b.Exchange, b.RoutingKey)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	ch, err := t.declChannel(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	err = t.conn.call(ctx, what, func() error {
		if b.ToExchange != "" {
			return ch.ExchangeBind(b.ToExchange, b.RoutingKey, b.Exchange, false, args)
		}
		return ch.QueueBind(b.Queue, b.RoutingKey, b.Exchange, false, args)
	})
	if b.ToExchange == "" && t.isAway(b.Queue, err) {
		return nil // bound before: the broker keeps the binding
	}
	if err != nil {
		return notFound(err)
	}
	return nil
}

// Declare declares the exchanges, then the queues, then the bindings. It
// goes on after a refusal, so one call reports every problem, joined with
// errors.Join; a binding whose queue or exchange failed is skipped.
func (t *Topology) Declare(ctx context.Context, exchanges []Exchange, queues []Queue, bindings []Binding) error {
	var errs []error
	failed := map[string]bool{}
	for _, x := range exchanges {
		if err := t.DeclareExchange(ctx, x); err != nil {
			errs = append(errs, err)
			failed["x:"+x.Name] = true
		}
	}
	for _, q := range queues {
		if err := t.DeclareQueue(ctx, q); err != nil {
			errs = append(errs, err)
			failed["q:"+q.Name] = true
		}
	}
	for _, b := range bindings {
		if failed["x:"+b.Exchange] || failed["q:"+b.Queue] || failed["x:"+b.ToExchange] {
			continue
		}
		if err := t.Bind(ctx, b); err != nil {
			errs = append(errs, err)
		}
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// passive runs fn on a throwaway channel: a failed passive declare closes
// the channel it ran on.
func (t *Topology) passive(ctx context.Context, what string, fn func(ch *amqp.Channel) error) error {
	ch, err := t.conn.Channel(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	err = t.conn.call(ctx, what, func() error { return fn(ch) })
	if !ch.IsClosed() {
		go func() { _ = ch.Close() }()
	}
	return err
}

// Inspect returns what the broker reports about queue without changing it.
// A missing queue gives an error matching ErrNotFound.
func (t *Topology) Inspect(ctx context.Context, queue string) (QueueInfo, error) {
	var info QueueInfo
	err := t.passive(ctx, fmt.Sprintf("inspect queue %q", queue), func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		info = QueueInfo{Name: q.Name, Messages: q.Messages, Consumers: q.Consumers}
		return err
	})
	if err != nil {
		return QueueInfo{}, notFound(err)
	}
	return info, nil
}

// Depth returns the number of ready messages in queue.
func (t *Topology) Depth(ctx context.Context, queue string) (int, error) {
	info, err := t.Inspect(ctx, queue)
	return info.Messages, err
}

// ExchangeExists reports whether an exchange named name exists.
func (t *Topology) ExchangeExists(ctx context.Context, name string) (bool, error) {
	err := t.passive(ctx, fmt.Sprintf("check exchange %q", name), func(ch *amqp.Channel) error {
		return ch.ExchangeDeclarePassive(name, "direct", false, false, false, false, nil)
	})
	if err == nil {
		return true, nil
	}
	if ReplyCode(err) == amqp.NotFound {
		return false, nil
	}
	return false, err
}

// CheckQueues asks the broker about each queue without creating or changing
// any, and returns one *MissingQueuesError naming every missing queue; other
// failures (access refused, the connection lost) are joined to it.
func (t *Topology) CheckQueues(ctx context.Context, queues ...string) error {
	var missing []string
	var errs []error
	for _, q := range queues {
		_, err := t.Inspect(ctx, q)
		switch {
		case err == nil, t.isAway(q, err):
		case errors.Is(err, ErrQueueUnavailable):
			errs = append(errs, err)
		case ReplyCode(err) == amqp.NotFound:
			missing = append(missing, q)
		default:
			errs = append(errs, err)
		}
	}
	if len(missing) > 0 {
		errs = append([]error{&MissingQueuesError{Queues: missing}}, errs...)
	}
	return errors.Join(errs...)
}

// DeleteQueue deletes queue and returns how many messages it held. Deleting
// a missing queue is not an error.
func (t *Topology) DeleteQueue(ctx context.Context, queue string) (int, error) {
	var n int
	err := t.passive(ctx, fmt.Sprintf("delete queue %q", queue), func(ch *amqp.Channel) error {
		var err error
		n, err = ch.QueueDelete(queue, false, false, false)
		return err
	})
	return n, err
}

// DeleteExchange deletes exchange. Deleting a missing exchange is not an
// error.
func (t *Topology) DeleteExchange(ctx context.Context, exchange string) error {
	return t.passive(ctx, fmt.Sprintf("delete exchange %q", exchange), func(ch *amqp.Channel) error {
		return ch.ExchangeDelete(exchange, false, false)
	})
}

// Get takes one message from queue (basic.get) without auto-ack, for
// inspection and replay. It returns nil, nil when the queue is empty. The
// Delivery must be settled like a consumed one; Nack(true) puts it back.
func (t *Topology) Get(ctx context.Context, queue string) (*Delivery, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.get == nil || t.get.ch.IsClosed() {
		if t.get != nil {
			t.get.dead.Store(true)
		}
		ch, err := t.conn.Channel(ctx)
		if err != nil {
			return nil, fmt.Errorf("get from queue %q: %w", queue, err)
		}
		t.get = &consGen{ch: ch}
	}
	g := t.get
	var (
		ad amqp.Delivery
		ok bool
	)
	err := t.conn.call(ctx, fmt.Sprintf("get from queue %q", queue), func() error {
		var err error
		ad, ok, err = g.ch.Get(queue, false)
		return err
	})
	if err != nil {
		return nil, notFound(err)
	}
	if !ok {
		return nil, nil
	}
	return &Delivery{Delivery: ad, g: g}, nil
}

// notFound makes a 404 from the broker match ErrNotFound, or, for a queue
// that exists on a node that is down, ErrQueueUnavailable.
func notFound(err error) error {
	if node, down := homeNodeDown(err); down {
		return &codedError{err: fmt.Errorf("the queue exists, but its home node %s is down or cannot be reached; start the node, or move the queue (a quorum queue has a member on several nodes): %w", node, err), is: ErrQueueUnavailable}
	}
	if ReplyCode(err) == amqp.NotFound {
		return &codedError{err: err, is: ErrNotFound}
	}
	return err
}

type codedError struct {
	err error
	is  error
}

func (e *codedError) Error() string        { return e.err.Error() }
func (e *codedError) Unwrap() error        { return e.err }
func (e *codedError) Is(target error) bool { return target == e.is }

// inequivalent parses RabbitMQ's PRECONDITION_FAILED text, only to word the
// error and, in a probe, to learn the broker's value; the decision that it
// is drift is made on the reply code.
var inequivalent = regexp.MustCompile(`inequivalent arg '([^']*)' for (?:queue|exchange) '.*' in vhost '.*': received (.*) but current is (.*)$`)

// declareError translates a refused declaration: a PRECONDITION_FAILED
// becomes a *DriftError naming the one setting the refusal names.
func declareError(kind, name string, err error) error {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return notFound(fmt.Errorf("declare %s %q: %w", kind, name, err))
	}
	d := &DriftError{Difference: Difference{Kind: kind, Name: name, Partial: true}, Reason: ae.Reason, Err: ae}
	if s, ok := refusedSetting(kind, ae.Reason); ok {
		d.Settings = []Setting{s}
	} else {
		d.Refusal = ae.Reason
	}
	return d
}

// refusedSetting is the setting one refusal names, with both values.
func refusedSetting(kind, reason string) (Setting, bool) {
	m := inequivalent.FindStringSubmatch(reason)
	if m == nil {
		return Setting{}, false
	}
	declared, dok := refusedText(m[2])
	broker, bok := refusedText(m[3])
	if !dok || !bok {
		return Setting{}, false
	}
	s := Setting{Name: m[1], Declared: declared, Broker: broker}
	switch {
	case kind == "queue" && s.Name == "x-queue-type":
		s.Name, s.Declared, s.Broker = "type", orDefault(declared, "classic"), orDefault(broker, "classic")
	case s.Name == "type" && kind == "exchange":
	case settingOrder[s.Name] > 0:
	default:
		s.Arg = true
	}
	return s, true
}

// refusedText is a value as a refusal writes it (none, 'X', the value 'X'
// of type 'T'), as text; none is "".
func refusedText(text string) (string, bool) {
	if text == "none" {
		return "", true
	}
	if m := typedText.FindStringSubmatch(text); m != nil {
		return m[1], true
	}
	if m := quotedText.FindStringSubmatch(text); m != nil {
		return m[1], true
	}
	return "", false
}
