package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/acemq-flow/plugins/host"
	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
)

// HandlerFunc is an in-process step handler, for Go programs that embed the
// runtime: it gets the same request a plugin gets. Returning an error wrapping
// ErrFatal dead-letters the message; any other error is retried.
type HandlerFunc func(ctx context.Context, req Request) (decide.Result, error)

// Request is one call of a handler: one message.
type Request struct {
	Handler  string // "<plugin>.<handler>"
	Envelope decide.Envelope
	Payload  []byte
}

// Options configure a Runtime. Settings of the deployment are options,
// never flow-file keys.
type Options struct {
	AMQPURL      string        // required
	DrainTimeout time.Duration // default 30s
	Log          *slog.Logger  // nil discards
	// Handlers are in-process handlers by "<plugin>.<handler>". A plugin all
	// of whose handlers the flows use are given here is not started.
	Handlers map[string]HandlerFunc
	// Name prefixes the broker connection names; default "acemq-flow".
	Name string
	// Store is the idempotency store; required when a consumer is
	// idempotent. ClaimTimeout is its claims' lease (0: the store's).
	Store        stores.Idempotency
	ClaimTimeout time.Duration
}

// Runtime runs a Plan: it connects, declares the topology, starts the
// plugins and the consumers, and drains them on shutdown.
//
// Lifecycle: New checks the plan and allocates (no I/O); Run connects,
// declares, consumes and blocks until ctx is done and draining is over.
type Runtime struct {
	plan *plan.Plan
	opts Options
	log  *slog.Logger

	routes    map[string][]string // pipeline → route
	ready     atomic.Bool
	started   chan struct{} // closed once the consumers run
	consume   *broker.Conn
	publish   *broker.Conn
	pub       *broker.Publisher
	foreign   *broker.Publisher // for exchanges the runtime does not declare (destinations.go)
	owned     map[string]bool   // exchanges the runtime declares, and ""
	exchanges *broker.ExchangeCache
	topo      *broker.Topology

	stopping chan struct{} // closed once Run drains, or fails to start: no consumer starts after it
	stopOnce sync.Once
	wg       sync.WaitGroup // every consumer goroutine
	metrics  *metrics
	paused   []string // groups stopped by Pause, started again by Resume
	pauseMu  sync.Mutex
	scaleMu  sync.Mutex // one Scale at a time: the consumer limit is checked across groups

	groups   map[string]*group       // by consumer id; fixed once Run has started them
	order    []string                // consumer ids, sorted
	plugins  map[string]*host.Plugin // by plugin key
	pluginMu sync.Mutex
}

// New checks that the runtime can run plan and allocates it. It does not
// connect or start anything.
func New(pl *plan.Plan, opts Options) (*Runtime, error) {
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
	for _, c := range pl.Consumers {
		if c.Delay > 0 {
			unsupported = append(unsupported, fmt.Sprintf("%s: step %q has a delay (the scheduler is %s)", c.At, c.Step, plan.ErrUnsupported))
		}
		if c.Idempotent && opts.Store == nil {
			return nil, fmt.Errorf("%s: consumer %q is idempotent, but no idempotency store is configured; run with --store", c.At, c.ID)
		}
	}
	for _, s := range pl.Sagas {
		unsupported = append(unsupported, fmt.Sprintf("%s: saga %q (sagas are %s)", s.At, s.Name, plan.ErrUnsupported))
	}
	for _, s := range pl.Schedules {
		unsupported = append(unsupported, fmt.Sprintf("%s: schedule %q (schedules are %s)", s.At, s.Name, plan.ErrUnsupported))
	}
	if len(unsupported) > 0 {
		return nil, fmt.Errorf("%w; remove these or run them elsewhere:\n  %s", plan.ErrUnsupported, strings.Join(unsupported, "\n  "))
	}
	if err := checkConsumerCount(pl); err != nil {
		return nil, err
	}
	r := &Runtime{plan: pl, opts: opts, log: opts.Log, routes: map[string][]string{}, groups: map[string]*group{},
		plugins: map[string]*host.Plugin{}, metrics: newMetrics(), started: make(chan struct{}), stopping: make(chan struct{})}
	for _, p := range pl.Pipelines {
		r.routes[p.Name] = p.Route
	}
	r.owned = ownedExchanges(pl)
	return r, nil
}

// Ready reports whether the topology is applied, the consumers run and both
// connections are up.
func (r *Runtime) Ready() bool {
	return r.ready.Load() && r.consume != nil && r.consume.State() == broker.StateConnected &&
		r.publish != nil && r.publish.State() == broker.StateConnected
}

// Metrics is what the runtime measures, for an admin listener's /metrics:
// deliveries by outcome, handler time, dead letters, in-flight deliveries,
// broker reconnects and plugin restarts.
func (r *Runtime) Metrics() prometheus.Gatherer { return r.metrics.reg }

// Started is closed once Run has applied the topology and started the
// consumers; it stays open when Run fails first.
func (r *Runtime) Started() <-chan struct{} { return r.started }

// Run connects, applies the topology, starts plugins and consumers, and
// blocks until ctx is done; then it drains every consumer (up to the drain
// timeout), stops the plugins and closes the connections. It returns nil
// after a clean shutdown.
func (r *Runtime) Run(ctx context.Context) (err error) {
	// Consumers stop when r.stopping closes, so that a failed start can
	// stop the ones already started (start all or none).
	defer r.stop()
	defer r.closeAll()
	if r.consume, err = broker.Open(ctx, r.opts.AMQPURL, broker.ConnOptions{Name: r.opts.Name + " consume", Log: r.log}); err != nil {
		return fmt.Errorf("connect to the broker: %w", err)
	}
	if r.publish, err = broker.Open(ctx, r.opts.AMQPURL, broker.ConnOptions{Name: r.opts.Name + " publish", Log: r.log}); err != nil {
		return fmt.Errorf("connect to the broker: %w", err)
	}
	r.metrics.watch(r)
	r.topo = broker.NewTopology(r.publish, r.log)
	startable, err := r.applyTopology(ctx)
	if err != nil {
		return err
	}
	if r.pub, err = broker.OpenPublisher(ctx, r.publish, broker.PublisherOptions{Log: r.log}); err != nil {
		return fmt.Errorf("open the publisher: %w", err)
	}
	if r.foreign, err = broker.OpenPublisher(ctx, r.publish, broker.PublisherOptions{Log: r.log}); err != nil {
		return fmt.Errorf("open the publisher: %w", err)
	}
	r.exchanges = broker.NewExchangeCache(r.topo.ExchangeExists, trustExchangeFound, trustExchangeMissing)
	if err := r.startPlugins(ctx, startable); err != nil {
		return err
	}
	for _, p := range r.plan.Pipelines {
		r.log.Info(p.Declaration, "pipeline", p.Name)
	}
	for i := range r.plan.Consumers {
		c := &r.plan.Consumers[i]
		r.groups[c.ID] = r.newGroup(c)
		r.order = append(r.order, c.ID)
	}
	for _, c := range startable {
		g := r.groups[c.ID]
		g.prepared = true
		if err := g.start(ctx); err != nil {
			r.stop()
			for _, id := range r.order {
				r.groups[id].shutdown()
			}
			r.wg.Wait()
			return err
		}
	}
	r.ready.Store(true)
	close(r.started)
	r.log.Info("runtime started", "consumers", len(startable))
	<-ctx.Done()
	r.stop()
	r.ready.Store(false)
	r.log.Info("draining", "timeout", r.opts.DrainTimeout)
	for _, id := range r.order {
		r.groups[id].shutdown()
	}
	r.wg.Wait()
	r.log.Info("drained")
	return nil
}

// stop tells every consumer to drain, and refuses consumers started from
// now on.
func (r *Runtime) stop() { r.stopOnce.Do(func() { close(r.stopping) }) }

// draining reports whether Run has begun to drain (or failed to start): a
// consumer started now would run on closed connections, with nothing to
// stop it.
func (r *Runtime) draining() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

func (r *Runtime) closeAll() {
	if r.pub != nil {
		_ = r.pub.Close()
	}
	if r.foreign != nil {
		_ = r.foreign.Close()
	}
	if r.topo != nil {
		_ = r.topo.Close()
	}
	r.pluginMu.Lock()
	for _, p := range r.plugins {
		_ = p.Close()
	}
	r.pluginMu.Unlock()
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
func (r *Runtime) applyTopology(ctx context.Context) ([]*plan.Consumer, error) {
	var exchanges []broker.Exchange
	var queues []broker.Queue
	declared := map[string]bool{}
	var check []string
	var problems []string
	for _, e := range r.plan.Exchanges {
		if e.Mode != plan.Declare || e.Apply == spec.ApplyDryRun {
			continue
		}
		exchanges = append(exchanges, broker.Exchange{Name: e.Name, Kind: e.Type, Durable: true})
	}
	// Consumers declared and checked when started: those with auto_startup
	// false that no route publishes to. A queue a route publishes to is
	// declared and bound now, consumed or not, so that a stopped step
	// leaves a backlog instead of a NO_ROUTE.
	later := map[string]bool{}
	for i := range r.plan.Consumers {
		if c := &r.plan.Consumers[i]; !c.AutoStartup && !r.routed(c) {
			later[c.ID] = true
		}
	}
	now := map[string]bool{} // queues declared now, whether or not this file's apply mode creates them
	for _, q := range r.plan.Queues {
		if !later[q.Owner] || q.Provided {
			now[q.Name] = true
		}
	}
	for _, q := range r.plan.Queues {
		// The .dlq of a queue declared now is declared now too: its dead
		// letters must not be dropped while its consumer waits.
		if q.Purpose == "dlq" && now[strings.TrimSuffix(q.Name, ".dlq")] {
			now[q.Name] = true
		}
	}
	for _, q := range r.plan.Queues {
		if !now[q.Name] {
			continue
		}
		if q.Mode != plan.Declare || q.Apply == spec.ApplyDryRun || (q.Apply == spec.ApplyValidate && q.Purpose == "declared") {
			if q.Mode == plan.Declare && q.Apply == spec.ApplyValidate {
				check = append(check, q.Name)
			}
			continue
		}
		declared[q.Name] = true
		queues = append(queues, broker.Queue{Name: q.Name, Durable: true, Args: q.Arguments})
	}
	var bindings []broker.Binding
	for _, b := range r.plan.Bindings {
		if later[b.Owner] && !(b.Exchange == plan.DeadLetterExchange && now[b.Queue]) {
			continue
		}
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
	var startable []*plan.Consumer
	missing := map[string]bool{}
	provided := map[string]bool{} // queues of routed, stopped consumers that exist without us
	for i := range r.plan.Consumers {
		c := &r.plan.Consumers[i]
		if !c.AutoStartup {
			// Checked when started by id; a routed one's queue is bound now
			// if it exists.
			if !later[c.ID] && !declared[c.Queue] && r.topo.CheckQueues(ctx, c.Queue) == nil {
				provided[c.Queue] = true
			}
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
		if declared[b.Queue] || provided[b.Queue] || slices.ContainsFunc(startable, func(c *plan.Consumer) bool { return c.Queue == b.Queue }) {
			live = append(live, b)
		}
	}
	if err := r.topo.Declare(ctx, nil, nil, live); err != nil {
		return nil, fmt.Errorf("apply topology: %w", err)
	}
	return startable, nil
}

// routed reports whether a route publishes to c's queue: a pipeline step's
// queue, or a queue bound where an itinerary's stop publishes. Its queue
// and bindings are declared at start even while c waits to be started.
func (r *Runtime) routed(c *plan.Consumer) bool {
	if c.Kind != plan.KindConsumer {
		return true
	}
	kinds := map[string]string{}
	for _, e := range r.plan.Exchanges {
		kinds[e.Name] = e.Type
	}
	for _, b := range r.plan.Bindings {
		if b.Owner != c.ID || b.Queue != c.Queue {
			continue
		}
		for _, it := range r.plan.Itineraries {
			for _, s := range it.Stops {
				if s.Exchange == b.Exchange && bindingMatches(kinds[b.Exchange], b.RoutingKey, s.RoutingKey) {
					return true
				}
			}
		}
	}
	return false
}

// bindingMatches reports whether a binding with key pattern on an exchange
// of kind routes a message published with key. An exchange of unknown kind
// (provided by someone else) is matched as topic: a wider match only
// declares a queue sooner.
func bindingMatches(kind, pattern, key string) bool {
	switch kind {
	case "fanout", "headers":
		return true
	case "direct":
		return pattern == key
	}
	return topicMatches(strings.Split(pattern, "."), strings.Split(key, "."))
}

func topicMatches(pattern, key []string) bool {
	if len(pattern) == 0 {
		return len(key) == 0
	}
	switch pattern[0] {
	case "#":
		for i := 0; i <= len(key); i++ {
			if topicMatches(pattern[1:], key[i:]) {
				return true
			}
		}
		return false
	case "*":
		return len(key) > 0 && topicMatches(pattern[1:], key[1:])
	}
	return len(key) > 0 && pattern[0] == key[0] && topicMatches(pattern[1:], key[1:])
}

// prepare declares and checks what one consumer needs, for a consumer
// started by id (auto_startup: false, or one left stopped because its
// queue was missing). It refuses while a queue is missing.
func (r *Runtime) prepare(ctx context.Context, c *plan.Consumer) error {
	var queues []broker.Queue
	declared := map[string]bool{}
	for _, q := range r.plan.Queues {
		if q.Owner != c.ID || q.Mode != plan.Declare || q.Apply == spec.ApplyDryRun {
			continue
		}
		if q.Apply == spec.ApplyValidate && q.Purpose == "declared" {
			continue
		}
		declared[q.Name] = true
		queues = append(queues, broker.Queue{Name: q.Name, Durable: true, Args: q.Arguments})
	}
	if err := r.topo.Declare(ctx, nil, queues, nil); err != nil {
		return fmt.Errorf("consumer %q: %w", c.ID, err)
	}
	var missing []string
	for _, q := range consumerQueues(c) {
		if declared[q] {
			continue
		}
		if err := r.topo.CheckQueues(ctx, q); err != nil {
			if !errors.Is(err, broker.ErrNotFound) {
				return fmt.Errorf("consumer %q: check queue %q: %w", c.ID, q, err)
			}
			missing = append(missing, q)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("consumer %q (%s) consumes queue %q, which does not exist; declare it, create it on the broker, then start the consumer again", c.ID, c.At, missing[0])
	}
	var bindings []broker.Binding
	for _, b := range r.plan.Bindings {
		if b.Owner == c.ID {
			bindings = append(bindings, broker.Binding{Exchange: b.Exchange, Queue: b.Queue, RoutingKey: b.RoutingKey})
		}
	}
	if err := r.topo.Declare(ctx, nil, nil, bindings); err != nil {
		return fmt.Errorf("consumer %q: %w", c.ID, err)
	}
	return nil
}

// consumerQueues are the queues a consumer needs: its own, its rungs, .dlq
// and .parked.
func consumerQueues(c *plan.Consumer) []string {
	qs := []string{c.Queue}
	for _, rg := range c.Retry.Rungs {
		if !slices.Contains(qs, rg.Queue) {
			qs = append(qs, rg.Queue)
		}
	}
	return append(qs, plan.DeadLetterQueue(c.Queue), plan.ParkedQueue(c.Queue))
}

// hostConfig is the plugin host's configuration for p, logging to log.
func hostConfig(p plan.PluginPlan, log *slog.Logger) host.Config {
	return host.Config{Name: p.Name, Command: p.Path, Dir: p.Dir, Args: p.Args, Env: p.Env, SHA256: p.SHA256,
		Timeout: time.Duration(p.Timeout), Logger: log}
}

func pluginKey(p plan.PluginPlan) string {
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

// startPlugins starts the plugins the startable consumers need.
func (r *Runtime) startPlugins(ctx context.Context, consumers []*plan.Consumer) error {
	for _, c := range consumers {
		if err := r.ensurePlugin(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

func (r *Runtime) pluginOf(c *plan.Consumer) plan.PluginPlan {
	for _, p := range r.plan.Plugins {
		if p.Name == c.Plugin && p.File == c.File.File {
			return p
		}
	}
	return plan.PluginPlan{}
}

// ensurePlugin starts the plugin a consumer needs, one process per distinct
// command, args, env and folder, unless an in-process handler replaces it,
// and checks that the handler exists there.
func (r *Runtime) ensurePlugin(ctx context.Context, c *plan.Consumer) error {
	if _, ok := r.opts.Handlers[c.Handler]; ok {
		return nil
	}
	p := r.pluginOf(c)
	key := pluginKey(p)
	r.pluginMu.Lock()
	defer r.pluginMu.Unlock()
	hp, ok := r.plugins[key]
	if !ok {
		started, err := host.Start(ctx, hostConfig(p, r.log))
		if err != nil {
			return fmt.Errorf("plugin %q (%s): %w", p.Name, p.At, err)
		}
		r.plugins[key] = started
		hp = started
	}
	_, handler, _ := strings.Cut(c.Handler, ".")
	var names []string
	for _, h := range hp.Handlers() {
		if h.Name == handler {
			return nil
		}
		names = append(names, h.Name)
	}
	slices.Sort(names)
	return fmt.Errorf("%s: consumer %q uses handler %q, but plugin %q serves no handler %q; it serves %s",
		c.At, c.ID, c.Handler, p.Name, handler, strings.Join(names, ", "))
}

// pluginRestarts reports each running plugin's restarts, by name.
func (r *Runtime) pluginRestarts() map[string]int64 {
	r.pluginMu.Lock()
	defer r.pluginMu.Unlock()
	out := map[string]int64{}
	for _, p := range r.plan.Plugins {
		if hp, ok := r.plugins[pluginKey(p)]; ok {
			out[p.Name] += hp.Restarts()
		}
	}
	return out
}

// callerFor returns how a consumer calls its handler, and the timeout the
// group must put on each call (0: none, or the caller applies its own).
func (r *Runtime) callerFor(c *plan.Consumer) (func(ctx context.Context, req Request) (decide.Result, error), time.Duration) {
	if h, ok := r.opts.Handlers[c.Handler]; ok {
		return h, 0
	}
	p := r.pluginOf(c)
	key := pluginKey(p)
	_, handler, _ := strings.Cut(c.Handler, ".")
	// A started plugin stays in r.plugins for the runtime's life (it
	// restarts its process itself), so it is looked up under the lock only
	// until found, not per message: ensurePlugin holds the lock while
	// another plugin starts.
	var found atomic.Pointer[host.Plugin]
	return func(ctx context.Context, req Request) (decide.Result, error) {
		caller := found.Load()
		if caller == nil {
			r.pluginMu.Lock()
			caller = r.plugins[key]
			r.pluginMu.Unlock()
			if caller == nil {
				return decide.Result{}, fmt.Errorf("plugin %q is not running", p.Name)
			}
			found.Store(caller)
		}
		res, err := caller.Call(ctx, host.Request{Handler: handler, Payload: req.Payload, Envelope: hostEnvelope(req.Envelope)})
		if err != nil {
			if host.IsFatal(err) {
				return decide.Result{}, fmt.Errorf("%w: %w", decide.ErrFatal, err)
			}
			return decide.Result{}, err
		}
		return decide.Result{Stop: res.Stop, Payload: res.Payload}, nil
	}, 0 // the host applies the plugin's timeout to every call itself
}

func hostEnvelope(e decide.Envelope) host.Envelope {
	h := make(map[string]string, len(e.Headers))
	for k, v := range e.Headers {
		if strings.HasPrefix(k, "x-acemq-") || k == plan.HeaderSlip {
			continue
		}
		h[k] = decide.HeaderText(v)
	}
	return host.Envelope{MessageID: e.MessageID, Type: e.Type, CorrelationID: decide.RunID(e), CausationID: e.CausationID,
		Origin: e.Origin, Attempt: e.Attempt, FirstSeen: e.FirstSeen, Headers: h}
}
