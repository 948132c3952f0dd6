package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq-flow/plugins/host"
	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/spec"
)

// HandlerFunc is an in-process step handler, for Go programs that embed the
// runtime: it gets the same request a plugin gets. Returning an error wrapping
// ErrFatal dead-letters the message; any other error is retried.
type HandlerFunc func(ctx context.Context, req Request) (Result, error)

// Request is one call of a handler: one message.
type Request struct {
	Handler  string // "<plugin>.<handler>"
	Envelope Envelope
	Payload  []byte
}

// Options configure a Runtime. Settings of the deployment are options,
// never flow-file keys.
type Options struct {
	AMQPURL      string        // required
	AdminAddr    string        // "" disables the admin listener
	DrainTimeout time.Duration // default 30s
	Log          *slog.Logger  // nil discards
	// Handlers are in-process handlers by "<plugin>.<handler>". A plugin all
	// of whose handlers the flows use are given here is not started.
	Handlers map[string]HandlerFunc
	// Name prefixes the broker connection names; default "acemq-flow".
	Name string
}

// Runtime runs a Plan: it connects, declares the topology, starts the
// plugins and the consumers, and drains them on shutdown.
//
// Lifecycle: New checks the plan and allocates (no I/O); Run connects,
// declares, consumes and blocks until ctx is done and draining is over.
type Runtime struct {
	plan *Plan
	opts Options
	log  *slog.Logger

	routes  map[string][]string // pipeline → route
	ready   atomic.Bool
	consume *broker.Conn
	publish *broker.Conn
	pub     *broker.Publisher
	topo    *broker.Topology

	mu      sync.Mutex
	groups  map[string]*group
	plugins map[string]stepCaller // by plugin key
}

// stepCaller is what a group needs of a plugin.
type stepCaller interface {
	Call(ctx context.Context, req host.Request) (host.Result, error)
}

// ErrUnsupported is returned by New for parts of the format the runtime does
// not run yet; the error names the feature and its position.
var ErrUnsupported = errors.New("not supported by this runtime yet")

// New checks that the runtime can run plan and allocates it. It does not
// connect or start anything.
func New(plan *Plan, opts Options) (*Runtime, error) {
	if opts.AMQPURL == "" {
		return nil, errors.New("no broker URL; set --amqp or ACEMQ_AMQP_URL")
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Name == "" {
		opts.Name = "acemq-flow"
	}
	var unsupported []string
	for _, c := range plan.Consumers {
		if c.Delay > 0 {
			unsupported = append(unsupported, fmt.Sprintf("%s: step %q has a delay (the scheduler is %s)", c.At, c.Step, ErrUnsupported))
		}
		if c.Idempotent {
			unsupported = append(unsupported, fmt.Sprintf("%s: consumer %q is idempotent (the idempotency store is %s)", c.At, c.ID, ErrUnsupported))
		}
	}
	for _, s := range plan.Sagas {
		unsupported = append(unsupported, fmt.Sprintf("%s: saga %q (sagas are %s)", s.At, s.Name, ErrUnsupported))
	}
	for _, s := range plan.Schedules {
		unsupported = append(unsupported, fmt.Sprintf("%s: schedule %q (schedules are %s)", s.At, s.Name, ErrUnsupported))
	}
	if len(unsupported) > 0 {
		return nil, fmt.Errorf("%w; remove these or run them elsewhere:\n  %s", ErrUnsupported, strings.Join(unsupported, "\n  "))
	}
	r := &Runtime{plan: plan, opts: opts, log: opts.Log, routes: map[string][]string{}, groups: map[string]*group{}, plugins: map[string]stepCaller{}}
	for _, p := range plan.Pipelines {
		r.routes[p.Name] = p.Route
	}
	return r, nil
}

// Ready reports whether the topology is applied, the consumers run and both
// connections are up.
func (r *Runtime) Ready() bool {
	return r.ready.Load() && r.consume != nil && r.consume.State() == broker.StateConnected &&
		r.publish != nil && r.publish.State() == broker.StateConnected
}

// Run connects, applies the topology, starts plugins and consumers, and
// blocks until ctx is done; then it drains every consumer (up to the drain
// timeout), stops the plugins and closes the connections. It returns nil
// after a clean shutdown.
func (r *Runtime) Run(ctx context.Context) (err error) {
	var admin *http.Server
	if r.opts.AdminAddr != "" {
		ln, err := net.Listen("tcp", r.opts.AdminAddr)
		if err != nil {
			return fmt.Errorf("admin listener on %s: %w", r.opts.AdminAddr, err)
		}
		admin = &http.Server{Handler: r.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = admin.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_ = admin.Shutdown(sctx)
		}()
		r.log.Info("admin listening", "addr", ln.Addr().String())
	}
	defer r.closeAll()
	if r.consume, err = broker.Open(ctx, r.opts.AMQPURL, broker.ConnOptions{Name: r.opts.Name + " consume", Log: r.log}); err != nil {
		return fmt.Errorf("connect to the broker: %w", err)
	}
	if r.publish, err = broker.Open(ctx, r.opts.AMQPURL, broker.ConnOptions{Name: r.opts.Name + " publish", Log: r.log}); err != nil {
		return fmt.Errorf("connect to the broker: %w", err)
	}
	r.topo = broker.NewTopology(r.publish, r.log)
	startable, err := r.applyTopology(ctx)
	if err != nil {
		return err
	}
	if r.pub, err = broker.OpenPublisher(ctx, r.publish, broker.PublisherOptions{Log: r.log}); err != nil {
		return fmt.Errorf("open the publisher: %w", err)
	}
	if err := r.startPlugins(ctx, startable); err != nil {
		return err
	}
	for _, p := range r.plan.Pipelines {
		r.log.Info(p.Declaration, "pipeline", p.Name)
	}
	var wg sync.WaitGroup
	for _, c := range startable {
		g := r.newGroup(c)
		r.mu.Lock()
		r.groups[c.ID] = g
		r.mu.Unlock()
		wg.Go(func() { g.run(ctx) })
	}
	r.ready.Store(true)
	r.log.Info("runtime started", "consumers", len(startable))
	<-ctx.Done()
	r.ready.Store(false)
	r.log.Info("draining", "timeout", r.opts.DrainTimeout)
	wg.Wait()
	r.log.Info("drained")
	return nil
}

func (r *Runtime) closeAll() {
	if r.pub != nil {
		_ = r.pub.Close()
	}
	if r.topo != nil {
		_ = r.topo.Close()
	}
	for _, p := range r.plugins {
		if c, ok := p.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	}
	if r.consume != nil {
		_ = r.consume.Close()
	}
	if r.publish != nil {
		_ = r.publish.Close()
	}
}

// applyTopology declares what the flows declare, as each file's
// topology.apply says, checks the queues consumers need, and returns the
// consumers that can start (missing_queue: warn leaves some out).
func (r *Runtime) applyTopology(ctx context.Context) ([]*Consumer, error) {
	var exchanges []broker.Exchange
	var queues []broker.Queue
	declared := map[string]bool{}
	var check []string
	var problems []string
	for _, e := range r.plan.Exchanges {
		if e.Mode != Declare || e.Apply == spec.ApplyDryRun {
			continue
		}
		exchanges = append(exchanges, broker.Exchange{Name: e.Name, Kind: e.Type, Durable: true})
	}
	for _, q := range r.plan.Queues {
		if q.Mode != Declare || q.Apply == spec.ApplyDryRun || (q.Apply == spec.ApplyValidate && q.Purpose == "declared") {
			if q.Mode == Declare && q.Apply == spec.ApplyValidate {
				check = append(check, q.Name)
			}
			continue
		}
		declared[q.Name] = true
		queues = append(queues, broker.Queue{Name: q.Name, Durable: true, Args: q.Arguments})
	}
	var bindings []broker.Binding
	for _, b := range r.plan.Bindings {
		bindings = append(bindings, broker.Binding{Exchange: b.Exchange, Queue: b.Queue, RoutingKey: b.RoutingKey})
	}
	// Exchanges first: a queue declaration cannot fail because of them.
	if err := r.topo.Declare(ctx, exchanges, queues, nil); err != nil {
		return nil, fmt.Errorf("apply topology: %w", err)
	}
	if len(check) > 0 {
		if err := r.topo.CheckQueues(ctx, check...); err != nil {
			return nil, fmt.Errorf("topology.apply is validate: %w", err)
		}
	}

	// The queues consumers need and nothing declares are asked about
	// passively, every missing one named in one failure (listeners.txt,
	// "A queue that does not exist").
	var startable []*Consumer
	missing := map[string]bool{}
	for i := range r.plan.Consumers {
		c := &r.plan.Consumers[i]
		if !c.AutoStartup {
			continue
		}
		for _, q := range consumerQueues(c) {
			if declared[q] {
				continue
			}
			if err := r.topo.CheckQueues(ctx, q); err != nil {
				if !errors.Is(err, broker.ErrNotFound) {
					return nil, fmt.Errorf("check queue %q: %w", q, err)
				}
				missing[c.ID] = true
				line := fmt.Sprintf("consumer %q (%s) consumes queue %q, which does not exist", c.ID, c.At, q)
				if c.Missing == spec.MissingWarn {
					r.log.Warn("consumer left stopped: its queue does not exist", "consumer", c.ID, "queue", q)
				} else {
					problems = append(problems, line)
				}
			}
		}
		if !missing[c.ID] {
			startable = append(startable, c)
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s\ndeclare the queues under topology.queues or with the consumer's declare:, create them on the broker, or set topology.missing_queue: warn to start without these consumers", strings.Join(problems, "\n"))
	}
	// Bindings of queues that exist.
	var live []broker.Binding
	for _, b := range bindings {
		if declared[b.Queue] || slices.ContainsFunc(startable, func(c *Consumer) bool { return c.Queue == b.Queue }) {
			live = append(live, b)
		}
	}
	if err := r.topo.Declare(ctx, nil, nil, live); err != nil {
		return nil, fmt.Errorf("apply topology: %w", err)
	}
	return startable, nil
}

// consumerQueues are the queues a consumer needs: its own, its rungs, .dlq
// and .parked.
func consumerQueues(c *Consumer) []string {
	qs := []string{c.Queue}
	for _, rg := range c.Retry.Rungs {
		if !slices.Contains(qs, rg.Queue) {
			qs = append(qs, rg.Queue)
		}
	}
	return append(qs, DeadLetterQueue(c.Queue), ParkedQueue(c.Queue))
}

func pluginKey(p PluginPlan) string {
	var b strings.Builder
	b.WriteString(p.Path + "\x02" + p.Dir)
	for _, a := range p.Args {
		b.WriteString("\x00" + a)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		b.WriteString("\x01" + k + "=" + p.Env[k])
	}
	return b.String()
}

// startPlugins starts one process per distinct plugin (command, args, env)
// that a startable consumer needs and no in-process handler replaces, and
// checks that the handlers the flows name exist.
func (r *Runtime) startPlugins(ctx context.Context, consumers []*Consumer) error {
	need := map[string][]*Consumer{} // plugin name@flow → consumers
	for _, c := range consumers {
		if _, ok := r.opts.Handlers[c.Handler]; ok {
			continue
		}
		need[c.Plugin+"@"+c.File.File] = append(need[c.Plugin+"@"+c.File.File], c)
	}
	for _, p := range r.plan.Plugins {
		cs := need[p.Name+"@"+p.File]
		if len(cs) == 0 {
			continue
		}
		key := pluginKey(p)
		if _, ok := r.plugins[key]; ok {
			continue
		}
		started, err := host.Start(ctx, host.Config{Name: p.Name, Command: p.Path, Dir: p.Dir, Args: p.Args, Env: p.Env, SHA256: p.SHA256,
			Timeout: time.Duration(p.Timeout), Logger: r.log})
		if err != nil {
			return fmt.Errorf("plugin %q (%s): %w", p.Name, p.At, err)
		}
		r.plugins[key] = started
		have := map[string]bool{}
		for _, h := range started.Handlers() {
			have[h.Name] = true
		}
		for _, c := range cs {
			_, handler, _ := strings.Cut(c.Handler, ".")
			if !have[handler] {
				return fmt.Errorf("%s: consumer %q uses handler %q, but plugin %q serves no handler %q; serves: %s",
					c.At, c.ID, c.Handler, p.Name, handler, strings.Join(slices.Sorted(maps.Keys(have)), ", "))
			}
		}
	}
	return nil
}

// callerFor returns how a consumer calls its handler.
func (r *Runtime) callerFor(c *Consumer) (func(ctx context.Context, req Request) (Result, error), time.Duration) {
	if h, ok := r.opts.Handlers[c.Handler]; ok {
		return h, 0
	}
	var plan PluginPlan
	for _, p := range r.plan.Plugins {
		if p.Name == c.Plugin && p.File == c.File.File {
			plan = p
		}
	}
	caller := r.plugins[pluginKey(plan)]
	_, handler, _ := strings.Cut(c.Handler, ".")
	return func(ctx context.Context, req Request) (Result, error) {
		res, err := caller.Call(ctx, host.Request{Handler: handler, Payload: req.Payload, Envelope: hostEnvelope(req.Envelope)})
		if err != nil {
			if host.IsFatal(err) {
				return Result{}, fmt.Errorf("%w: %w", ErrFatal, err)
			}
			return Result{}, err
		}
		return Result{Stop: res.Stop, Payload: res.Payload}, nil
	}, time.Duration(plan.Timeout)
}

func hostEnvelope(e Envelope) host.Envelope {
	h := make(map[string]string, len(e.Headers))
	for k, v := range e.Headers {
		if strings.HasPrefix(k, "x-acemq-") || k == HeaderSlip {
			continue
		}
		h[k] = strHeader(v)
	}
	return host.Envelope{MessageID: e.MessageID, Type: e.Type, CorrelationID: runID(e), CausationID: e.CausationID,
		Origin: e.Origin, Attempt: e.Attempt, FirstSeen: e.FirstSeen, Headers: h}
}

func (r *Runtime) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// group is one consumer group: a queue, a handler and counters.
type group struct {
	r      *Runtime
	c      *Consumer
	log    *slog.Logger
	bc     *broker.Consumer
	call   func(ctx context.Context, req Request) (Result, error)
	tmo    time.Duration
	counts map[string]*atomic.Int64
	bg     sync.WaitGroup // follow-up work started from confirm callbacks
}

func (r *Runtime) newGroup(c *Consumer) *group {
	call, tmo := r.callerFor(c)
	g := &group{r: r, c: c, call: call, tmo: tmo,
		log:    r.log.With("flow", c.Flow, "consumer", c.ID, "queue", c.Queue),
		counts: map[string]*atomic.Int64{}}
	for _, o := range []string{OutcomeAcknowledged, OutcomeStopped, OutcomeRetried, OutcomeDeadLettered, OutcomeDuplicate, OutcomeInProgress, "rejected"} {
		g.counts[o] = &atomic.Int64{}
	}
	g.bc = broker.NewConsumer(r.consume, broker.ConsumerOptions{Queue: c.Queue, Tag: c.ID, Prefetch: c.Prefetch,
		Concurrency: c.Concurrency, DrainTimeout: r.opts.DrainTimeout, Log: g.log})
	return g
}

func (g *group) run(ctx context.Context) {
	g.log.Info("consumer started", "prefetch", g.c.Prefetch, "concurrency", g.c.Concurrency)
	err := g.bc.Run(ctx, g.handle)
	g.bg.Wait()
	var de *broker.DrainError
	switch {
	case errors.As(err, &de):
		g.log.Warn(fmt.Sprintf("consumer %s still had %d message(s) in flight after %s; they will be redelivered", g.c.ID, de.Left, de.After))
	case err != nil:
		g.log.Error("consumer stopped", "error", err)
	default:
		g.log.Info("consumer drained")
	}
}

// handle runs one delivery: check, call, decide, then publish what the
// decision says and acknowledge only once every publish is confirmed.
func (g *group) handle(ctx context.Context, d *broker.Delivery) {
	in := InboundFrom(d.Delivery)
	dec, _ := Precheck(g.c, in, time.Now())
	if dec == nil {
		cctx := ctx
		if g.tmo > 0 {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, g.tmo)
			defer cancel()
		}
		start := time.Now()
		res, err := g.call(cctx, Request{Handler: g.c.Handler, Envelope: in.Env, Payload: in.Body})
		if err != nil {
			g.log.Debug("handler failed", "message_id", in.Env.MessageID, "attempt", in.Env.Attempt, "error", err, "duration", time.Since(start))
		}
		d2 := Decide(g.c, g.r.routes[g.c.Pipeline], in, res, err, time.Now(), rand.Float64())
		dec = &d2
	}
	g.carryOut(ctx, d, in, *dec)
}

func (g *group) carryOut(ctx context.Context, d *broker.Delivery, in Inbound, dec Decision) {
	if len(dec.Publish) == 0 {
		g.settle(d, in, dec)
		return
	}
	var (
		mu      sync.Mutex
		pending = len(dec.Publish)
		failed  error
	)
	done := func(p Publish) func(error) {
		return func(err error) {
			if err != nil && p.BestEffort && errors.Is(err, broker.ErrUnroutable) {
				g.log.Warn("reply not delivered: nothing listens on reply_to any more", "message_id", in.Env.MessageID, "routing_key", p.RoutingKey)
				err = nil
			}
			mu.Lock()
			if err != nil && failed == nil {
				failed = err
			}
			pending--
			last := pending == 0
			mu.Unlock()
			if last {
				if failed != nil {
					// Confirm callbacks must not publish; the follow-up runs
					// on its own goroutine, owned by the group.
					g.bg.Go(func() { g.publishFailed(ctx, d, in, dec, failed) })
					return
				}
				g.settle(d, in, dec)
			}
		}
	}
	for _, p := range dec.Publish {
		if err := g.r.pub.PublishFunc(ctx, p.Message, done(p)); err != nil {
			done(p)(err)
		}
	}
}

func (g *group) settle(d *broker.Delivery, in Inbound, dec Decision) {
	if err := d.Ack(); err != nil {
		// The channel closed first: the broker requeues the delivery.
		g.log.Debug("acknowledgement dropped; the message will be redelivered", "message_id", in.Env.MessageID, "error", err)
		return
	}
	g.counts[dec.Outcome].Add(1)
	switch dec.Outcome {
	case OutcomeRetried:
		g.log.Warn("delivery retried", "message_id", in.Env.MessageID, "attempt", in.Env.Attempt, "rung", dec.Rung, "error", dec.Reason)
	case OutcomeDeadLettered:
		g.log.Warn("delivery dead-lettered", "message_id", in.Env.MessageID, "attempt", in.Env.Attempt, "error", dec.Reason)
	default:
		g.log.Debug("delivery "+dec.Outcome, "message_id", in.Env.MessageID)
	}
}

// publishFailed handles a decision whose publish did not reach a queue. An
// unroutable next stop is fatal for the message (it would not route next
// time either): it is dead-lettered with the reason. Anything else leaves
// the message to the broker, requeued, to be handled again.
func (g *group) publishFailed(ctx context.Context, d *broker.Delivery, in Inbound, dec Decision, err error) {
	if errors.Is(err, broker.ErrUnroutable) && dec.Outcome != OutcomeDeadLettered {
		g.log.Warn("result unroutable; dead-lettering the message", "message_id", in.Env.MessageID, "error", err)
		dl := deadLetter(g.c, in, KindFatal, "the result could not be routed: "+err.Error(), time.Now())
		g.carryOut(ctx, d, in, dl)
		return
	}
	g.log.Warn("publish failed; the message goes back to its queue", "message_id", in.Env.MessageID, "error", err)
	if nerr := d.Nack(true); nerr == nil {
		g.counts["rejected"].Add(1)
	}
}
