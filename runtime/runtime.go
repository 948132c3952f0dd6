package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/plugins/host"
	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/hostcall"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/scheduler"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
)

// HandlerFunc is an in-process step handler, for Go programs that embed the
// runtime: it gets the same request a plugin gets. Returning an error wrapping
// ErrFatal dead-letters the message; any other error is retried.
type HandlerFunc func(ctx context.Context, req Request) (decide.Result, error)

// Request is one call of a handler: one message (hostcall.Request, the
// request a plugin's handler is called with).
type Request = hostcall.Request

// Options configure a Runtime. Settings of the deployment are options,
// never flow-file keys.
type Options struct {
	// AMQPURL is the broker's URL, required: one, or several separated by
	// commas (broker.SplitURLs), to which AMQPURLs adds more. Given the
	// nodes of a cluster, the runtime connects to the first that answers
	// and, when a connection is lost, to the next (broker.OpenURLs).
	AMQPURL  string
	AMQPURLs []string
	// Management is the broker's management API, where the topology check
	// reads what a queue or exchange is (see broker.ConnOptions.Management:
	// "" derives it from AMQPURL, broker.ManagementOff keeps away).
	Management   string
	DrainTimeout time.Duration // default 30s
	Log          *slog.Logger  // nil discards
	// Handlers are in-process handlers by "<plugin>.<handler>". A plugin all
	// of whose handlers the flows use are given here is not started.
	Handlers map[string]HandlerFunc
	// Name prefixes the broker connection names; default "acemq-flow".
	Name string
	// Tracing is where the runtime's spans go (runtime/tracing: a span per
	// delivery processed, per publish and per plugin call, the W3C trace
	// context carried in the messages' headers); nil, the default, traces
	// nothing and costs nothing. `acemq-flow run` builds it from the
	// OTEL_* environment (tracing.FromEnv). The caller shuts it down after
	// Run returns.
	Tracing trace.TracerProvider
	// Store is the idempotency store; required when a consumer is
	// idempotent. ClaimTimeout is its claims' lease (0: the store's).
	Store        stores.Idempotency
	ClaimTimeout time.Duration
	// Delays makes the runtime declare the delay ladder and consume its
	// `.due` queue even when no step of the plan has a delay, so that what
	// others put in the ladder (send --in, SendDelayed, any client) is
	// delivered; `acemq-flow run` sets it. A plan with a step delay always
	// does (step_delay.go).
	Delays bool
	// LadderUnit is for tests only: what one second of the ladder is (a
	// whole number of milliseconds; see plan.Ladder). 0 is the real 1 s.
	LadderUnit time.Duration
	// Sagas is the store the plan's sagas keep their instances in;
	// required, with Store, when the plan has sagas. `acemq-flow run`
	// passes the store it opened (--store) as both.
	Sagas stores.Sagas
	// Schedules is the store the plan's schedules claim their ticks in,
	// writing each firing to its outbox; required when the plan has
	// schedules. The caller runs the outbox relay on it (runtime/relay;
	// `acemq-flow run` does whenever the flows have schedules).
	Schedules stores.ScheduleTicks
	// Blobs is the claim check's blob store (FLOW-FORMAT §6): a delivery
	// carrying a reference gets its body from it, and a result above its
	// type's claim_check.above is put there and published as a reference.
	// Nil: results travel inline, and a reference is dead-lettered.
	Blobs stores.Blobs
	// Registry is the schema registry the Avro codec registers the flows'
	// Avro types in at start and reads writers' schemas from (FLOW-FORMAT
	// §6); required when the flows have an Avro type. Every stores.Set is
	// one. RegistryReadOnly only looks the types up (`run
	// --registry-readonly`): a subject without its type's schema stops the
	// start, naming every one.
	Registry         codec.Registry
	RegistryReadOnly bool
	// StallAfter is how long a consumer group may hold deliveries and
	// finish none before it is stalled and the runtime not ready (Stalls).
	// 0, the default, gives each group its handler's call timeout + the
	// 30 s confirm deadline + 30 s (90 s with the plugins' default
	// timeout); tests set it shorter.
	StallAfter time.Duration
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
	outages  *outages // the runtime's stores found unavailable (infra.go)
	paused   []string // groups stopped by Pause, started again by Resume
	pauseMu  sync.Mutex
	scaleMu  sync.Mutex // one Scale at a time: the consumer limit is checked across groups

	ladder  *decide.Ladder    // nil unless the runtime declares the delay ladder and consumes .due
	delayed decide.StepDelays // steps with a delay, by where their input is published

	schedules *scheduler.Schedules // nil without schedules (schedules.go)
	tracer    *tracing.Tracer      // nil with tracing off (step_trace.go)
	codec     *codec.Codec         // nil without Avro types (step_codec.go)

	groups   map[string]*group       // by consumer id; fixed once Run has started them
	order    []string                // consumer ids, sorted
	plugins  map[string]*host.Plugin // by plugin key
	pluginMu sync.Mutex
}

// New checks that the runtime can run plan and allocates it. It does not
// connect or start anything.
func New(pl *plan.Plan, opts Options) (*Runtime, error) {
	if len(opts.brokerURLs()) == 0 {
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
	if err := checkSagas(pl, opts); err != nil {
		return nil, err
	}
	for _, c := range pl.Consumers {
		if c.Idempotent && opts.Store == nil {
			return nil, fmt.Errorf("%s: consumer %q is idempotent, but no idempotency store is configured; run with --store", c.At, c.ID)
		}
	}
	if err := Supported(pl); err != nil {
		return nil, err
	}
	if err := checkConsumerCount(pl); err != nil {
		return nil, err
	}
	r := &Runtime{plan: pl, opts: opts, log: opts.Log, routes: map[string][]string{}, groups: map[string]*group{},
		plugins: map[string]*host.Plugin{}, metrics: newMetrics(), started: make(chan struct{}), stopping: make(chan struct{})}
	r.outages = newOutages(r)
	r.metrics.reg.MustRegister(newStalledGauge(r))
	for _, p := range pl.Pipelines {
		r.routes[p.Name] = p.Route
	}
	if opts.Delays || usesLadder(pl) {
		r.ladder = &decide.Ladder{Unit: opts.LadderUnit}
		r.plan = withLadder(pl, opts.LadderUnit)
	}
	r.delayed = decide.DelayedSteps(pl)
	r.owned = ownedExchanges(r.plan)
	r.tracer = tracing.New(opts.Tracing)
	if len(pl.Sagas) > 0 {
		// What the store holds of the sagas' instances, every replica the
		// same numbers (FLOW-FORMAT §5's metrics).
		var names []string
		for _, s := range pl.Sagas {
			names = append(names, s.Name)
		}
		r.metrics.reg.MustRegister(NewSagaMetrics(opts.Sagas, SagaMetricsOptions{Sagas: names, Log: opts.Log}))
	}
	sch, err := newSchedules(r.plan, opts, r.metrics, r.encodeOwn)
	if err != nil {
		return nil, err
	}
	r.schedules = sch
	if r.codec, err = newCodec(pl, opts); err != nil {
		return nil, err
	}
	if err := r.checkSchedulePayloads(); err != nil {
		return nil, err
	}
	return r, nil
}

// checkSchedulePayloads refuses a schedule whose payload does not fit the
// Avro type its firings are encoded by (encodeOwn's), the input of the
// queue its exchange and routing key reach: the payload is the same at
// every tick, so no firing of it could ever be sent. (A schedule sending
// to a pipeline, itinerary or saga has its payload checked against their
// input when the plan is compiled.)
func (r *Runtime) checkSchedulePayloads() error {
	if r.codec == nil {
		return nil
	}
	var bad []string
	for _, s := range r.plan.Schedules {
		m, err := decide.TickMessage(r.plan, s, time.Now())
		if err != nil {
			continue // NewSchedules refused it already
		}
		typ := r.ownType(m)
		if typ == nil {
			continue
		}
		if err := typ.ValidateJSON(m.Body); err != nil {
			bad = append(bad, fmt.Sprintf("%s: schedule %q of flow %q: its payload does not fit Avro type %s (%s), the input of what it sends to: %v; change the payload or the type",
				s.At, s.Name, s.Flow, typ.Name, typ.Pos, err))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "\n"))
	}
	return nil
}

// Supported returns an error wrapping plan.ErrUnsupported, naming each
// feature and its position, when pl uses parts of the format this runtime
// does not run. Today it runs all of them, Avro types included (their
// payloads go through the codec wrapper, step_codec.go), and returns nil.
// New calls it; the CLI calls it first too, before opening anything.
func Supported(pl *plan.Plan) error {
	return nil
}

// Ready reports whether the topology is applied, the consumers run and both
// connections are up, not blocked by the broker (a resource alarm) and
// proven alive since the process last ran (broker.Health): after a freeze
// longer than the heartbeat the runtime is not ready until the broker has
// been heard from again, or the connections were redialled. Nor is it
// ready while one of its stores is unavailable (StoreOutages), nor while a
// consumer group holds deliveries and has finished none for longer than
// its stall duration (Stalls): connections up do not prove that messages
// move.
func (r *Runtime) Ready() bool {
	if !r.ready.Load() || len(r.StoreOutages()) > 0 || len(r.Stalls()) > 0 {
		return false
	}
	hs := r.Connections()
	for _, h := range hs {
		if !h.Ready() {
			return false
		}
	}
	return len(hs) == 2
}

// Connections returns the health of the runtime's two broker connections,
// the consuming one first, once Run has started them; nil before.
func (r *Runtime) Connections() []broker.Health {
	select {
	case <-r.started:
	default:
		return nil
	}
	var hs []broker.Health
	for _, c := range []*broker.Conn{r.consume, r.publish} {
		if c != nil {
			hs = append(hs, c.Health())
		}
	}
	return hs
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
	if r.consume, err = broker.OpenURLs(ctx, r.opts.brokerURLs(), broker.ConnOptions{Name: r.opts.Name + " consume", Log: r.log}); err != nil {
		return fmt.Errorf("connect to the broker: %w", err)
	}
	if r.publish, err = broker.OpenURLs(ctx, r.opts.brokerURLs(), broker.ConnOptions{Name: r.opts.Name + " publish", Log: r.log, Management: r.opts.Management}); err != nil {
		return fmt.Errorf("connect to the broker: %w", err)
	}
	r.metrics.watch(r)
	r.topo = broker.NewTopology(r.publish, r.log)
	startable, err := r.applyTopology(ctx)
	if err != nil {
		return err
	}
	if r.pub, err = broker.OpenPublisher(ctx, r.publish, broker.PublisherOptions{Log: r.log, ConfirmTimeout: confirmDeadline}); err != nil {
		return fmt.Errorf("open the publisher: %w", err)
	}
	if r.foreign, err = broker.OpenPublisher(ctx, r.publish, broker.PublisherOptions{Log: r.log, ConfirmTimeout: confirmDeadline}); err != nil {
		return fmt.Errorf("open the publisher: %w", err)
	}
	r.exchanges = broker.NewExchangeCache(r.topo.ExchangeExists, trustExchangeFound, trustExchangeMissing)
	// Before any consumer starts: a schema missing from a read-only
	// registry, or an incompatible one, stops the start.
	if err := r.registerTypes(ctx); err != nil {
		return err
	}
	if err := r.startPlugins(ctx, startable); err != nil {
		return err
	}
	for _, p := range r.plan.Pipelines {
		r.log.Info("pipeline declared", "pipeline", p.Name, "declaration", p.Declaration)
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
	if err := r.startDue(ctx); err != nil {
		r.stop()
		for _, id := range r.order {
			r.groups[id].shutdown()
		}
		r.wg.Wait()
		return err
	}
	if err := r.startSchedules(ctx); err != nil {
		r.stop()
		for _, id := range r.order {
			r.groups[id].shutdown()
		}
		r.wg.Wait()
		return err
	}
	r.ready.Store(true)
	close(r.started)
	r.wg.Go(r.watchStalls)
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

// applyTopology applies what the flows declare, as each file's
// topology.apply says, checks the queues consumers need, and returns the
// consumers that can start (missing_queue: warn leaves some out). Under
// create-only, what exists is checked for drift before anything is
// declared, and what is missing is declared; under validate, nothing is
// created and everything is checked, every difference named at once; under
// dry-run, nothing is declared or checked but the queues consumers need.
func (r *Runtime) applyTopology(ctx context.Context) ([]*plan.Consumer, error) {
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
	now := map[string]bool{} // queues applied now, whether or not this file's apply mode creates them
	for _, q := range r.plan.Queues {
		if !later[q.Owner] || q.Provided {
			now[q.Name] = true
		}
	}
	for _, q := range r.plan.Queues {
		// The .dlq of a queue applied now is applied now too: its dead
		// letters must not be dropped while its consumer waits.
		if q.Purpose == "dlq" && now[strings.TrimSuffix(q.Name, plan.DeadLetterQueue(""))] {
			now[q.Name] = true
		}
	}
	var queues []plan.Queue
	for _, q := range r.plan.Queues {
		if now[q.Name] {
			queues = append(queues, q)
		}
	}
	var bindings []plan.Binding
	for _, b := range r.plan.Bindings {
		if later[b.Owner] && !(b.Exchange == plan.DeadLetterExchange && now[b.Queue]) {
			continue
		}
		bindings = append(bindings, b)
	}
	t := r.sortTopology(r.plan.Exchanges, queues, bindings)
	if err := r.checkAndDeclare(ctx, t); err != nil {
		return nil, err
	}

	// The queues consumers need and nothing declares are asked about
	// passively, every missing one named in one failure (listeners.txt,
	// "A queue that does not exist").
	var startable []*plan.Consumer
	var problems []string
	missing := map[string]bool{}
	provided := map[string]bool{} // queues of routed, stopped consumers that exist without us
	for i := range r.plan.Consumers {
		c := &r.plan.Consumers[i]
		if !c.AutoStartup {
			// Checked when started by id; a routed one's queue is bound now
			// if it exists.
			if !later[c.ID] && !t.exist[c.Queue] && r.topo.CheckQueues(ctx, c.Queue) == nil {
				provided[c.Queue] = true
			}
			continue
		}
		for _, q := range consumerQueues(c) {
			if t.exist[q] {
				continue
			}
			if err := r.checkConsumerQueue(ctx, c, q); err != nil {
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
	for _, b := range t.bind {
		if b.ToExchange != "" || t.exist[b.Queue] || provided[b.Queue] || slices.ContainsFunc(startable, func(c *plan.Consumer) bool { return c.Queue == b.Queue }) {
			live = append(live, b)
		}
	}
	if err := r.topo.Declare(ctx, nil, nil, live); err != nil {
		return nil, fmt.Errorf("apply topology: %w", err)
	}
	return startable, nil
}

// topologyWork is part of a plan sorted by what topology.apply says to do
// with it.
type topologyWork struct {
	declareX []broker.Exchange // create-only: checked for drift, then declared
	declareQ []broker.Queue
	checkX   []broker.Exchange // validate: checked, never created
	checkQ   []broker.Queue
	checkB   []broker.Binding
	bind     []broker.Binding // bound once their queues are known to exist
	exist    map[string]bool  // queues that exist once the work is done
}

// sortTopology sorts exchanges, queues and bindings by their file's
// topology.apply. acemq.dlx, which every file's dead letters share, is
// declared when anything is, and checked when everything is validated.
func (r *Runtime) sortTopology(exchanges []plan.Exchange, queues []plan.Queue, bindings []plan.Binding) topologyWork {
	t := topologyWork{exist: map[string]bool{}}
	applyOf := map[string]string{}
	for _, q := range queues {
		applyOf[q.Name] = q.Apply
		if q.Mode != plan.Declare || q.Apply == spec.ApplyDryRun {
			continue
		}
		bq := broker.Queue{Name: q.Name, Durable: true, Args: q.Arguments, Unconsumed: q.Holding()}
		if q.Apply == spec.ApplyValidate {
			t.checkQ = append(t.checkQ, bq)
		} else {
			t.declareQ = append(t.declareQ, bq)
		}
		t.exist[q.Name] = true
	}
	for _, e := range exchanges {
		if e.Mode != plan.Declare || e.Apply == spec.ApplyDryRun {
			continue
		}
		bx := broker.Exchange{Name: e.Name, Kind: e.Type, Durable: true}
		switch {
		case e.Name == plan.DeadLetterExchange && len(t.declareQ) == 0 && len(t.checkQ) > 0:
			t.checkX = append(t.checkX, bx)
		case e.Name == plan.DeadLetterExchange && len(t.declareQ) == 0:
			// Nothing is declared: nothing dead-letters through it yet.
		case e.Apply == spec.ApplyValidate:
			t.checkX = append(t.checkX, bx)
		default:
			t.declareX = append(t.declareX, bx)
		}
	}
	for _, b := range bindings {
		bb := broker.Binding{Exchange: b.Exchange, Queue: b.Queue, ToExchange: b.ToExchange, RoutingKey: b.RoutingKey}
		if applyOf[b.Queue] == spec.ApplyValidate {
			// Validate binds nothing either: the binding must be there.
			t.checkB = append(t.checkB, bb)
			continue
		}
		t.bind = append(t.bind, bb)
	}
	return t
}

// checkAndDeclare checks what topology.apply: validate names (creating
// nothing) and what create-only declares for drift, naming every problem,
// before it declares anything; then it declares what create-only asks for.
// Exchanges go first: a queue declaration cannot fail because of them.
func (r *Runtime) checkAndDeclare(ctx context.Context, t topologyWork) error {
	var errs []error
	if len(t.checkX)+len(t.checkQ)+len(t.checkB) > 0 {
		if _, err := r.topo.Check(ctx, t.checkX, t.checkQ, t.checkB); err != nil {
			errs = append(errs, fmt.Errorf("topology.apply is validate, and the broker does not have what the flows need: %w", err))
		}
	}
	if len(t.declareX)+len(t.declareQ) > 0 {
		if err := r.topo.CheckDrift(ctx, t.declareX, t.declareQ); err != nil {
			errs = append(errs, fmt.Errorf("apply topology: %w", err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := r.topo.Declare(ctx, t.declareX, t.declareQ, nil); err != nil {
		return fmt.Errorf("apply topology: %w", err)
	}
	return nil
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
// queue was missing), as applyTopology does at start. It refuses while a
// queue is missing.
func (r *Runtime) prepare(ctx context.Context, c *plan.Consumer) error {
	var queues []plan.Queue
	for _, q := range r.plan.Queues {
		if q.Owner == c.ID {
			queues = append(queues, q)
		}
	}
	var bindings []plan.Binding
	for _, b := range r.plan.Bindings {
		if b.Owner == c.ID {
			bindings = append(bindings, b)
		}
	}
	t := r.sortTopology(nil, queues, bindings)
	if err := r.checkAndDeclare(ctx, t); err != nil {
		return fmt.Errorf("consumer %q: %w", c.ID, err)
	}
	var missing []string
	for _, q := range consumerQueues(c) {
		if t.exist[q] {
			continue
		}
		if err := r.checkConsumerQueue(ctx, c, q); err != nil {
			if !errors.Is(err, broker.ErrNotFound) {
				return fmt.Errorf("consumer %q: check queue %q: %w", c.ID, q, err)
			}
			missing = append(missing, q)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("consumer %q (%s) consumes queue %q, which does not exist; declare it, create it on the broker, then start the consumer again", c.ID, c.At, missing[0])
	}
	if err := r.topo.Declare(ctx, nil, nil, t.bind); err != nil {
		return fmt.Errorf("consumer %q: %w", c.ID, err)
	}
	return nil
}

// checkConsumerQueue asks the broker about q, one of consumerQueues(c),
// without changing it. c's .dlq or .parked on a node that is down is taken
// as it is (broker.Queue.Unconsumed): nothing consumes it, and what is
// dead-lettered meanwhile waits until the node is back.
func (r *Runtime) checkConsumerQueue(ctx context.Context, c *plan.Consumer, q string) error {
	err := r.topo.CheckQueues(ctx, q)
	if err != nil && (q == plan.DeadLetterQueue(c.Queue) || q == plan.ParkedQueue(c.Queue)) {
		return r.topo.Unconsumed(q, err)
	}
	return err
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

// startPlugins starts the plugins the startable consumers need.
func (r *Runtime) startPlugins(ctx context.Context, consumers []*plan.Consumer) error {
	for _, c := range consumers {
		if err := r.ensurePlugin(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// stallAfter is consumer c's stall duration: Options.StallAfter, else
// stallAfter of its plugin's call timeout (stall.go).
func (r *Runtime) stallAfter(c *plan.Consumer) time.Duration {
	if r.opts.StallAfter > 0 {
		return r.opts.StallAfter
	}
	var call time.Duration
	if _, inProcess := r.opts.Handlers[c.Handler]; !inProcess && c.Handler != "" {
		call = time.Duration(r.pluginOf(c).Timeout)
	}
	return stallAfter(call)
}

func (r *Runtime) pluginOf(c *plan.Consumer) plan.Plugin {
	p, _ := hostcall.PluginOf(r.plan, c)
	return p
}

// ensurePlugin starts the plugin a consumer needs, one process per distinct
// command, args, env and folder, unless an in-process handler replaces it,
// and checks that the handler exists there.
func (r *Runtime) ensurePlugin(ctx context.Context, c *plan.Consumer) error {
	if _, ok := r.opts.Handlers[c.Handler]; ok || c.Handler == "" {
		return nil // in process, or no handler at all (a saga's timeout)
	}
	p := r.pluginOf(c)
	key := hostcall.Key(p)
	r.pluginMu.Lock()
	defer r.pluginMu.Unlock()
	hp, ok := r.plugins[key]
	if !ok {
		started, err := host.Start(ctx, hostcall.Config(p, r.log))
		if err != nil {
			return fmt.Errorf("plugin %q (%s): %w", p.Name, p.At, err)
		}
		r.plugins[key] = started
		hp = started
	}
	handler := hostcall.Handler(c.Handler)
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
		if hp, ok := r.plugins[hostcall.Key(p)]; ok {
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
	if c.Handler == "" {
		return func(context.Context, Request) (decide.Result, error) {
			return decide.Result{}, fmt.Errorf("%w: consumer %q has no handler to call", decide.ErrFatal, c.ID)
		}, 0
	}
	p := r.pluginOf(c)
	key := hostcall.Key(p)
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
		return hostcall.Call(ctx, caller, req)
	}, 0 // the host applies the plugin's timeout to every call itself
}
