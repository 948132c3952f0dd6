package plan

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/spec"
)

// Plan is everything a set of flows needs on the broker and in the runtime:
// exchanges, queues with their arguments, bindings, consumers with their
// retry ladders, and the routes. It is plain data, sorted by name, with no
// timestamps or absolute paths: `plan --format json` is the Plan encoded, and
// Compile gives byte-identical plans for the same flows.
type Plan struct {
	Exchanges   []Exchange  `json:"exchanges"`
	Queues      []Queue     `json:"queues"`
	Bindings    []Binding   `json:"bindings"`
	Consumers   []Consumer  `json:"consumers"`
	Pipelines   []Pipeline  `json:"pipelines,omitempty"`
	Itineraries []Itinerary `json:"itineraries,omitempty"`
	Sagas       []Saga      `json:"sagas,omitempty"`
	Schedules   []Schedule  `json:"schedules,omitempty"`
	Plugins     []Plugin    `json:"plugins,omitempty"`
}

// Exchange is an exchange the flows need.
type Exchange struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Mode    Mode     `json:"mode"`
	Purpose string   `json:"purpose"`
	At      spec.Pos `json:"-"`
	Apply   string   `json:"-"`
}

// Mode says what the runtime does with a queue or exchange at start.
type Mode string

// Declaration modes.
const (
	// Declare: created if missing, checked for drift if present (under
	// `apply: create-only`; only checked under `validate`; nothing under
	// `dry-run`).
	Declare Mode = "declare"
	// Check: provided by someone else; checked passively, never created.
	Check Mode = "check"
)

// Queue is a queue the flows need.
type Queue struct {
	Name      string         `json:"name"`
	Type      string         `json:"type"` // quorum | classic
	Mode      Mode           `json:"mode"`
	Purpose   string         `json:"purpose"` // step, consumer, retry, dlq, parked, declared, saga, compensate
	Owner     string         `json:"owner,omitempty"`
	Arguments map[string]any `json:"arguments,omitempty"`
	At        spec.Pos       `json:"-"`
	Apply     string         `json:"-"` // the topology.apply of the file that declares it
	Missing   string         `json:"-"` // the topology.missing_queue of that file
	what      string         // how errors name it
	holding   bool           // a .dlq or .parked the runtime declares (Holding)
	Provided  bool           `json:"-"` // declared under topology.queues: provided for, whoever consumes it
}

// Binding binds a queue to an exchange, or, when ToExchange is set (and
// Queue empty), an exchange to another: the delay ladder's levels route a
// message on to the next level by exchange-to-exchange bindings.
type Binding struct {
	Exchange   string   `json:"exchange"`
	Queue      string   `json:"queue"`
	ToExchange string   `json:"to_exchange,omitempty"`
	RoutingKey string   `json:"routing_key"`
	Owner      string   `json:"owner,omitempty"`
	At         spec.Pos `json:"-"`
}

// ConsumerKind says what a consumer serves.
type ConsumerKind string

// Kinds of consumer.
const (
	KindStep     ConsumerKind = "step"
	KindConsumer ConsumerKind = "consumer"
	// KindSagaStep consumes a saga step's queue or its compensation's
	// (Consumer.Compensate), KindSagaTimeout a saga's timeout queue: the
	// saga's instances are read and written around each delivery.
	KindSagaStep    ConsumerKind = "saga-step"
	KindSagaTimeout ConsumerKind = "saga-timeout"
)

// Consumer is one consumer group: a queue, a handler and its settings.
type Consumer struct {
	ID          string       `json:"id"`
	Kind        ConsumerKind `json:"kind"`
	Flow        string       `json:"flow"`
	Queue       string       `json:"queue"`
	Handler     string       `json:"handler"`
	Plugin      string       `json:"plugin"`
	Input       string       `json:"input,omitempty"`
	Output      string       `json:"output,omitempty"`
	Prefetch    int          `json:"prefetch"`
	Concurrency int          `json:"concurrency"`
	Idempotent  bool         `json:"idempotent"`
	AutoStartup bool         `json:"auto_startup"`
	Retry       Retry        `json:"retry"`
	Pipeline    string       `json:"pipeline,omitempty"`
	Saga        string       `json:"saga,omitempty"`
	Step        string       `json:"step,omitempty"`
	Compensate  bool         `json:"compensate,omitempty"` // a saga step's compensation
	Position    int          `json:"position,omitempty"`   // index of the step in its pipeline's route
	Delay       Duration     `json:"delay,omitempty"`
	Description string       `json:"description,omitempty"`
	Missing     string       `json:"missing_queue"` // fail | warn
	ClaimCheck  ClaimCheck   `json:"claim_check"`
	At          spec.Pos     `json:"-"`
	File        *spec.Flow   `json:"-"`
}

// ClaimCheck is a consumer's claim-check thresholds (FLOW-FORMAT §6), in
// bytes: a body larger than Input arrives by claim check when the sender
// applies its input type's threshold, and a result larger than Output is
// put in the blob store and published as a reference.
type ClaimCheck struct {
	Input  int64 `json:"input_above"`
	Output int64 `json:"output_above"`
}

// Retry is a consumer's retry ladder, worked out.
type Retry struct {
	MaxAttempts  int      `json:"max_attempts"`
	InitialDelay Duration `json:"initial_delay"`
	MaxDelay     Duration `json:"max_delay"`
	Jitter       float64  `json:"jitter"`
	Rungs        []Rung   `json:"rungs"` // one per retry, in order: rung i is before attempt i+2
}

// Rung is the retry queue a message waits in before one attempt.
type Rung struct {
	Attempt int      `json:"attempt"` // the attempt the message makes after waiting
	Delay   Duration `json:"delay"`
	Queue   string   `json:"queue"`
}

// RungFor returns the rung a message that failed attempt n waits in, and
// whether there is one (false: attempts are exhausted).
func (r Retry) RungFor(failed int) (Rung, bool) {
	if failed < 1 || failed > len(r.Rungs) {
		return Rung{}, false
	}
	return r.Rungs[failed-1], true
}

// Duration is a time.Duration that encodes as its string ("2s").
type Duration time.Duration

// MarshalText renders the duration as Go writes it.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// String renders the duration as Go writes it.
func (d Duration) String() string { return time.Duration(d).String() }

// Pipeline is a pipeline's route.
type Pipeline struct {
	Name        string     `json:"name"`
	Flow        string     `json:"flow"`
	Exchange    string     `json:"exchange"`
	Route       []string   `json:"route"`
	Input       string     `json:"input,omitempty"`
	Declaration string     `json:"declaration"`
	At          spec.Pos   `json:"-"`
	File        *spec.Flow `json:"-"`
}

// Itinerary is an itinerary's stops.
type Itinerary struct {
	Name  string          `json:"name"`
	Flow  string          `json:"flow"`
	Input string          `json:"input,omitempty"`
	Stops []Stop          `json:"stops"`
	At    spec.Pos        `json:"-"`
	Spec  *spec.Itinerary `json:"-"`
	File  *spec.Flow      `json:"-"`
}

// Stop is one stop of an itinerary.
type Stop struct {
	Name       string `json:"name"`
	Exchange   string `json:"exchange"`
	RoutingKey string `json:"routing_key"`
	When       string `json:"when,omitempty"`
}

// Saga is a saga's steps and compensations. Timeout (0: none) is how long
// an instance may run; its message waits in the delay ladder and is
// consumed from TimeoutQueue.
type Saga struct {
	Name         string     `json:"name"`
	Flow         string     `json:"flow"`
	Input        string     `json:"input,omitempty"`
	Timeout      Duration   `json:"timeout,omitempty"`
	TimeoutQueue string     `json:"timeout_queue,omitempty"`
	Steps        []SagaStep `json:"steps"`
	At           spec.Pos   `json:"-"`
	// Spec is the saga as loaded, with its steps' compiled `when`
	// conditions, and File the flow that declares it (its types). Both are
	// nil in a plan read back from JSON.
	Spec *spec.Saga `json:"-"`
	File *spec.Flow `json:"-"`
}

// SagaStep is one saga step.
type SagaStep struct {
	Name         string `json:"name"`
	Handler      string `json:"handler"`
	Compensate   string `json:"compensate,omitempty"`
	When         string `json:"when,omitempty"`
	Queue        string `json:"queue"`
	Compensation string `json:"compensation_queue,omitempty"`
}

// Schedule is a schedule: when it fires (Cron or Every, in Timezone), what
// it does with missed ticks (Missed, looking back MissedWindow) and what it
// sends (Send). Target describes the send for people.
type Schedule struct {
	Name         string   `json:"name"`
	Flow         string   `json:"flow"`
	Cron         string   `json:"cron,omitempty"`
	Every        Duration `json:"every,omitempty"`
	Timezone     string   `json:"timezone"`
	Missed       string   `json:"missed"`
	MissedWindow Duration `json:"missed_window"`
	Target       string   `json:"target"` // "exchange X key K", "pipeline P", ...
	Send         Send     `json:"send"`
	At           spec.Pos `json:"-"`
}

// Key is how the store knows the schedule: `<flow>/<schedule>`, also the
// value of the x-acemq-schedule header of its firings.
func (s Schedule) Key() string { return s.Flow + "/" + s.Name }

// Send is what a schedule publishes at each tick: its payload, to the start
// of a pipeline, itinerary or saga, or to an exchange with a routing key.
// Exchange and RoutingKey are resolved for a pipeline too (its exchange and
// first step); an itinerary's first stop depends on the payload's `when`s
// and is decided when it fires.
type Send struct {
	Pipeline   string          `json:"pipeline,omitempty"`
	Itinerary  string          `json:"itinerary,omitempty"`
	Saga       string          `json:"saga,omitempty"`
	Exchange   string          `json:"exchange,omitempty"`
	RoutingKey string          `json:"routing_key,omitempty"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// Plugin is a plugin process the runtime starts: one per distinct
// command, args and env.
type Plugin struct {
	Name    string            `json:"name"`
	File    string            `json:"file"` // the flow file that declares it
	Command string            `json:"command"`
	Args    []string          `json:"args,omitempty"`
	Timeout Duration          `json:"timeout"`
	Path    string            `json:"-"`
	Dir     string            `json:"-"`
	Env     map[string]string `json:"-"`
	SHA256  string            `json:"-"`
	At      spec.Pos          `json:"-"`
}

// Compile works out the Plan of a set of loaded flows. It is pure: no I/O,
// no clock, no environment. It fails with spec.Diagnostics when derived wire
// names collide (pipeline `a.b` + step `c` and pipeline `a` + step `b.c`)
// or a consumer id is used twice, naming both places.
func Compile(flows []*spec.Flow) (*Plan, error) {
	c := &compiler{queues: map[string]*Queue{}, exchanges: map[string]*Exchange{}, ids: map[string]spec.Pos{}}
	c.exchange(Exchange{Name: DeadLetterExchange, Type: "direct", Mode: Declare, Purpose: "dead letters"})
	// Topology first: a queue the flows declare is taken as provided for.
	for _, f := range flows {
		for _, e := range f.Topology.Exchanges {
			c.exchange(Exchange{Name: e.Name, Type: e.Type, Mode: Declare, Purpose: "declared", At: e.Pos, Apply: f.Topology.Apply})
		}
		for _, q := range f.Topology.Queues {
			if dq := c.declared(q, "declared", "", f); dq != nil {
				dq.Provided = true
			}
		}
	}
	for _, f := range flows {
		for _, p := range f.Pipelines {
			c.pipeline(f, p)
		}
		for _, cs := range f.Consumers {
			c.consumer(f, cs)
		}
		for _, s := range f.Sagas {
			c.saga(f, s)
		}
		for _, it := range f.Itineraries {
			c.itinerary(f, it)
		}
		for _, s := range f.Schedules {
			c.schedule(f, s)
		}
		for _, p := range f.Plugins {
			c.plan.Plugins = append(c.plan.Plugins, Plugin{Name: p.Name, File: f.File, Command: p.Command, Args: p.Args,
				Timeout: Duration(p.Timeout), Path: p.Path, Dir: p.Dir, Env: p.Env, SHA256: p.SHA256, At: p.Pos})
		}
	}
	c.scheduleRoutes()
	c.claimChecks()
	c.deadLetterQueues()
	c.brokerNames()
	if len(c.diags) > 0 {
		c.diags.Sort()
		return nil, c.diags
	}
	c.finish()
	return &c.plan, nil
}

type compiler struct {
	plan      Plan
	queues    map[string]*Queue
	exchanges map[string]*Exchange
	bindings  []Binding
	ids       map[string]spec.Pos
	diags     spec.Diagnostics
}

func (c *compiler) errorf(pos spec.Pos, code, hint, format string, args ...any) {
	c.diags = append(c.diags, spec.Diagnostic{Pos: pos, Severity: spec.Error, Code: code, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

func (c *compiler) exchange(e Exchange) {
	if prev, ok := c.exchanges[e.Name]; ok {
		if prev.Type != e.Type {
			c.errorf(e.At, "exchange-collision", "rename one of them",
				"exchange %q is needed as %s for %s and as %s for %s (%s)", e.Name, e.Type, e.Purpose, prev.Type, prev.Purpose, prev.At)
		}
		return
	}
	c.exchanges[e.Name] = &e
}

// queue adds a queue the runtime derives. A second queue of the same name
// is a collision, reported naming both.
func (c *compiler) queue(q Queue) {
	if prev, ok := c.queues[q.Name]; ok {
		c.errorf(q.At, "queue-collision", "rename a pipeline, step, saga or queue so that the derived names differ",
			"queue %q is needed by %s (%s) and by %s (%s)", q.Name, describeQueue(q), q.At, describeQueue(*prev), prev.At)
		return
	}
	c.queues[q.Name] = &q
}

func describeQueue(q Queue) string {
	if q.what != "" {
		return q.what
	}
	switch q.Purpose {
	case "declared":
		return "a queue declaration"
	case "retry", "dlq", "parked":
		return fmt.Sprintf("the %s of consumer %q", q.Purpose, q.Owner)
	}
	if q.Owner != "" {
		return fmt.Sprintf("%s %q", q.Purpose, q.Owner)
	}
	return q.Purpose
}

func (c *compiler) id(id string, pos spec.Pos) bool {
	if prev, ok := c.ids[id]; ok {
		c.errorf(pos, "duplicate-consumer", "registry ids are unique across every flow a runtime loads; rename one",
			"consumer id %q is used twice: here and at %s", id, prev)
		return false
	}
	c.ids[id] = pos
	return true
}

// declared adds a queue the flows declare explicitly (topology.queues or a
// consumer's declare). Declarations of one queue were checked to agree by
// spec.Load, so the first one stands.
func (c *compiler) declared(q *spec.Queue, purpose, owner string, f *spec.Flow) *Queue {
	if prev, ok := c.queues[q.Name]; ok && prev.Purpose == "declared" {
		if owner != "" {
			prev.Owner = owner
		}
		return prev
	}
	args := queueArguments(q.Name, q.Type, q.DeadLetter, q.Arguments)
	c.queue(Queue{Name: q.Name, Type: q.Type, Mode: Declare, Purpose: purpose, Owner: owner, Arguments: args, At: q.Pos,
		Apply: f.Topology.Apply, Missing: f.Topology.MissingQueue})
	return c.queues[q.Name]
}

// queueArguments are the arguments of a queue the runtime declares
// (FLOW-FORMAT §2): quorum queues get an explicit delivery limit and
// at-least-once dead-lettering to acemq.dlx, so a message that crash-loops is
// kept on RabbitMQ 3.10 as on 4.x; classic queues dead-letter only when asked.
func queueArguments(name, typ string, deadLetter bool, user map[string]any) map[string]any {
	args := map[string]any{}
	if typ == "quorum" {
		args["x-queue-type"] = "quorum"
		args["x-delivery-limit"] = int64(DefaultDeliveryLimit)
		args["x-dead-letter-exchange"] = DeadLetterExchange
		args["x-dead-letter-routing-key"] = DeadLetterQueue(name)
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	} else {
		args["x-queue-type"] = "classic"
		if deadLetter {
			args["x-dead-letter-exchange"] = DeadLetterExchange
			args["x-dead-letter-routing-key"] = DeadLetterQueue(name)
		}
	}
	maps.Copy(args, user)
	return args
}

// ladder declares the retry rungs, .dlq and .parked of a consumed queue,
// under the topology.apply of the file that declares the consumer, and
// returns the consumer's retry plan.
func (c *compiler) ladder(owner, queue, typ string, r spec.Retry, idempotent bool, at spec.Pos, apply string) Retry {
	rp := Retry{MaxAttempts: r.MaxAttempts, InitialDelay: Duration(r.InitialDelay), MaxDelay: Duration(r.MaxDelay), Jitter: r.Jitter}
	delays := map[time.Duration]bool{}
	for n := 1; n < r.MaxAttempts; n++ {
		d := RetryDelay(r, n)
		rp.Rungs = append(rp.Rungs, Rung{Attempt: n + 1, Delay: Duration(d), Queue: RetryQueue(queue, d)})
		delays[d] = true
	}
	if idempotent {
		delays[InProgressDelay] = true
	}
	for _, d := range slices.Sorted(maps.Keys(delays)) {
		c.queue(Queue{Name: RetryQueue(queue, d), Type: typ, Mode: Declare, Purpose: "retry", Owner: owner,
			Arguments: rungArguments(queue, typ, d), At: at, Apply: apply})
	}
	c.queue(holdingQueue(DeadLetterQueue(queue), "dlq", owner, at, apply))
	c.queue(holdingQueue(ParkedQueue(queue), "parked", owner, at, apply))
	c.bindings = append(c.bindings, dlqBinding(DeadLetterQueue(queue), owner, at))
	return rp
}

// holdingQueue is a .dlq or .parked queue. They are classic queues: a
// classic queue has no delivery limit on any broker version, so inspecting
// them never drops anything.
func holdingQueue(name, purpose, owner string, at spec.Pos, apply string) Queue {
	return Queue{Name: name, Type: "classic", Mode: Declare, Purpose: purpose, Owner: owner, At: at,
		Apply: apply, Arguments: map[string]any{"x-queue-type": "classic"}, holding: true}
}

// Holding reports whether q is a .dlq or a .parked queue the runtime
// declares (the delay ladder's own included): one it only publishes to,
// which nothing consumes.
func (q Queue) Holding() bool { return q.holding }

// dlqBinding binds .dlq queue dlq to acemq.dlx under its own name.
func dlqBinding(dlq, owner string, at spec.Pos) Binding {
	return Binding{Exchange: DeadLetterExchange, Queue: dlq, RoutingKey: dlq, Owner: owner, At: at}
}

// deadLetterQueues gives every queue the runtime declares that dead-letters
// to acemq.dlx with routing key `<queue>.dlq` that .dlq (classic, as ladder
// makes it for a consumed queue) and its acemq.dlx binding, so that
// `dead_letter: true` on a queue nobody consumes keeps its dead letters. A
// .dlq that ladder made already, or that a flow declares itself, is not
// made twice.
func (c *compiler) deadLetterQueues() {
	for _, name := range slices.Sorted(maps.Keys(c.queues)) {
		q := c.queues[name]
		if q.Mode != Declare || q.Purpose == "dlq" || q.Purpose == "parked" || q.Purpose == "retry" {
			continue
		}
		dlq := DeadLetterQueue(q.Name)
		if q.Arguments["x-dead-letter-exchange"] != DeadLetterExchange || q.Arguments["x-dead-letter-routing-key"] != dlq {
			continue
		}
		if prev, ok := c.queues[dlq]; !ok || prev.Purpose != "dlq" && prev.Purpose != "declared" {
			// A missing .dlq is made; one another part of the flows
			// needs under this name is a collision, reported by queue.
			hq := holdingQueue(dlq, "dlq", q.Owner, q.At, q.Apply)
			hq.what, hq.Provided = fmt.Sprintf("the .dlq of queue %q", q.Name), q.Provided
			c.queue(hq)
		}
		// finish drops the duplicate when ladder bound it already.
		c.bindings = append(c.bindings, dlqBinding(dlq, q.Owner, q.At))
	}
}

// RetryDelay is the delay before retry n (n ≥ 1): initial_delay × 2^(n-1),
// capped at max_delay (FLOW-FORMAT §2, the retry ladder).
func RetryDelay(r spec.Retry, n int) time.Duration {
	d := r.InitialDelay
	for i := 1; i < n; i++ {
		d *= 2
		if d >= r.MaxDelay || d <= 0 {
			return r.MaxDelay
		}
	}
	return min(d, r.MaxDelay)
}

// rungArguments: one uniform TTL, dead-lettering back to the queue through
// the default exchange; at-least-once where the queue type allows it.
func rungArguments(queue, typ string, d time.Duration) map[string]any {
	args := map[string]any{
		"x-queue-type":              typ,
		"x-message-ttl":             d.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": queue,
	}
	if typ == "quorum" {
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	return args
}

// claimChecks fills in each consumer's claim-check thresholds from the
// types of its file: its input's, and its output's (a type's own
// claim_check, else the file's defaults).
func (c *compiler) claimChecks() {
	for i := range c.plan.Consumers {
		cs := &c.plan.Consumers[i]
		if cs.File == nil {
			continue
		}
		out := cs.Output
		if out == spec.OutputNone {
			out = ""
		}
		cs.ClaimCheck = ClaimCheck{Input: cs.File.ClaimCheckAbove(cs.Input), Output: cs.File.ClaimCheckAbove(out)}
	}
}

func (c *compiler) pipeline(f *spec.Flow, p *spec.Pipeline) {
	route := make([]string, len(p.Steps))
	parts := make([]string, len(p.Steps))
	for i, s := range p.Steps {
		route[i] = s.Name
		parts[i] = s.Name
		if s.Description != "" {
			parts[i] += " (" + s.Description + ")"
		}
	}
	c.exchange(Exchange{Name: PipelineExchange(p.Name), Type: "direct", Mode: Declare, Purpose: "pipeline " + p.Name, At: p.Pos, Apply: f.Topology.Apply})
	c.plan.Pipelines = append(c.plan.Pipelines, Pipeline{
		Name: p.Name, Flow: f.Name, Exchange: PipelineExchange(p.Name), Route: route, Input: p.Input, At: p.Pos, File: f,
		Declaration: fmt.Sprintf("pipeline %s declared with %d steps: %s", p.Name, len(p.Steps), strings.Join(parts, " | ")),
	})
	for i, s := range p.Steps {
		id := StepConsumerID(p.Name, s.Name)
		q := StepQueue(p.Name, s.Name)
		n := len(c.diags)
		c.queue(Queue{Name: q, Type: s.QueueType, Mode: Declare, Purpose: "step", Owner: id,
			what:      fmt.Sprintf("step %q of pipeline %q", s.Name, p.Name),
			Arguments: queueArguments(q, s.QueueType, true, nil), At: s.Pos, Apply: f.Topology.Apply, Missing: f.Topology.MissingQueue})
		if len(c.diags) > n || !c.id(id, s.Pos) {
			continue
		}
		c.bindings = append(c.bindings, Binding{Exchange: PipelineExchange(p.Name), Queue: q, RoutingKey: s.Name, Owner: id, At: s.Pos})
		rp := c.ladder(id, q, s.QueueType, s.Retry, s.Idempotent, s.Pos, f.Topology.Apply)
		c.plan.Consumers = append(c.plan.Consumers, Consumer{
			ID: id, Kind: KindStep, Flow: f.Name, Queue: q, Handler: s.Handler.String(), Plugin: s.Handler.Plugin,
			Input: s.Input, Output: s.Output, Prefetch: s.Prefetch, Concurrency: s.Concurrency, Idempotent: s.Idempotent,
			AutoStartup: s.AutoStartup, Retry: rp, Pipeline: p.Name, Step: s.Name, Position: i, Delay: Duration(s.Delay),
			Description: s.Description, Missing: f.Topology.MissingQueue, At: s.Pos, File: f,
		})
	}
}

func (c *compiler) consumer(f *spec.Flow, cs *spec.Consumer) {
	if !c.id(cs.ID, cs.Pos) {
		return
	}
	typ := f.Defaults.QueueType
	if cs.Declare != nil {
		q := c.declared(cs.Declare, "declared", cs.ID, f)
		typ = cs.Declare.Type
		if q != nil {
			typ = q.Type
		}
	} else if q, ok := c.queues[cs.Queue]; ok && q.Purpose == "declared" {
		q.Owner = cs.ID
		typ = q.Type
	} else if ok && q.Purpose != "declared" {
		c.errorf(cs.QueuePos, "queue-collision", "consume a queue of your own; scale a step with concurrency instead",
			"consumer %q consumes queue %q, which is %s (%s)", cs.ID, cs.Queue, describeQueue(*q), q.At)
		return
	} else {
		// Provided by someone else: checked passively at start.
		c.queue(Queue{Name: cs.Queue, Type: typ, Mode: Check, Purpose: "consumer", Owner: cs.ID, At: cs.QueuePos,
			Apply: f.Topology.Apply, Missing: f.Topology.MissingQueue})
	}
	for _, b := range cs.Bind {
		c.bindings = append(c.bindings, Binding{Exchange: b.Exchange, Queue: cs.Queue, RoutingKey: b.RoutingKey, Owner: cs.ID, At: b.Pos})
		if _, ok := c.exchanges[b.Exchange]; !ok {
			// Not declared by any loaded flow: must exist on the broker.
			c.exchanges[b.Exchange] = &Exchange{Name: b.Exchange, Type: "", Mode: Check, Purpose: "bound by consumer " + cs.ID, At: b.Pos}
		}
	}
	if typ == "" {
		typ = spec.DefaultQueueType
	}
	rp := c.ladder(cs.ID, cs.Queue, typ, cs.Retry, cs.Idempotent, cs.Pos, f.Topology.Apply)
	c.plan.Consumers = append(c.plan.Consumers, Consumer{
		ID: cs.ID, Kind: KindConsumer, Flow: f.Name, Queue: cs.Queue, Handler: cs.Handler.String(), Plugin: cs.Handler.Plugin,
		Input: cs.Input, Output: cs.Output, Prefetch: cs.Prefetch, Concurrency: cs.Concurrency, Idempotent: cs.Idempotent,
		AutoStartup: cs.AutoStartup, Retry: rp, Description: cs.Description, Missing: f.Topology.MissingQueue, At: cs.Pos, File: f,
	})
}

// saga adds a saga's exchange and, for each step and each compensation, a
// queue, its binding, its ladder and its consumer, as for a pipeline step
// (FLOW-FORMAT §2 and §5), and for a saga with a timeout the timeout's.
// Saga consumers are idempotent whatever the file's defaults say: a copy of
// a step's message that arrives while the first is being handled (a
// republish after a crash, a timeout's stale result) must wait for it, not
// run the handler beside it.
func (c *compiler) saga(f *spec.Flow, s *spec.Saga) {
	sp := Saga{Name: s.Name, Flow: f.Name, Input: s.Input, Timeout: Duration(s.Timeout), At: s.Pos, Spec: s, File: f}
	c.exchange(Exchange{Name: SagaExchange(s.Name), Type: "direct", Mode: Declare, Purpose: "saga " + s.Name, At: s.Pos, Apply: f.Topology.Apply})
	typ := f.Defaults.QueueType
	// add declares cons's queue, bound with key, its ladder under r, and
	// adds cons with the settings every saga consumer shares.
	add := func(cons Consumer, key, purpose, what string, r spec.Retry) bool {
		n := len(c.diags)
		c.queue(Queue{Name: cons.Queue, Type: typ, Mode: Declare, Purpose: purpose, Owner: cons.ID, what: what, At: cons.At,
			Arguments: queueArguments(cons.Queue, typ, true, nil), Apply: f.Topology.Apply, Missing: f.Topology.MissingQueue})
		if len(c.diags) > n || !c.id(cons.ID, cons.At) {
			return false
		}
		c.bindings = append(c.bindings, Binding{Exchange: SagaExchange(s.Name), Queue: cons.Queue, RoutingKey: key, Owner: cons.ID, At: cons.At})
		cons.Retry = c.ladder(cons.ID, cons.Queue, typ, r, true, cons.At, f.Topology.Apply)
		cons.Flow, cons.Saga, cons.File, cons.Missing = f.Name, s.Name, f, f.Topology.MissingQueue
		cons.Prefetch, cons.Concurrency, cons.Idempotent, cons.AutoStartup = f.Defaults.Prefetch, f.Defaults.Concurrency, true, true
		c.plan.Consumers = append(c.plan.Consumers, cons)
		return true
	}
	for _, st := range s.Steps {
		q := SagaStepQueue(s.Name, st.Name)
		step := SagaStep{Name: st.Name, Handler: st.Handler.String(), Compensate: st.Compensate.String(), When: st.When.Source, Queue: q}
		add(Consumer{ID: SagaStepConsumerID(s.Name, st.Name), Kind: KindSagaStep, Queue: q, Handler: st.Handler.String(), Plugin: st.Handler.Plugin,
			Input: s.Input, Output: st.Output, Step: st.Name, At: st.Pos},
			SagaStepKey(st.Name), "saga", fmt.Sprintf("step %q of saga %q", st.Name, s.Name), st.Retry)
		if st.Compensate.Plugin != "" {
			cq := CompensateQueue(s.Name, st.Name)
			step.Compensation = cq
			add(Consumer{ID: CompensateConsumerID(s.Name, st.Name), Kind: KindSagaStep, Queue: cq, Handler: st.Compensate.String(), Plugin: st.Compensate.Plugin,
				Input: s.Input, Step: st.Name, Compensate: true, At: st.CompensatePos},
				CompensateKey(st.Name), "compensate", fmt.Sprintf("the compensation of step %q of saga %q", st.Name, s.Name), st.Retry)
		}
		sp.Steps = append(sp.Steps, step)
	}
	if s.Timeout > 0 {
		// Its message has no payload, and no handler is called: the
		// runtime acts on it.
		tq := TimeoutQueue(s.Name)
		if add(Consumer{ID: TimeoutConsumerID(s.Name), Kind: KindSagaTimeout, Queue: tq, At: s.TimeoutPos},
			TimeoutKey, "timeout", fmt.Sprintf("the timeout of saga %q", s.Name), f.Defaults.Retry) {
			sp.TimeoutQueue = tq
		}
	}
	c.plan.Sagas = append(c.plan.Sagas, sp)
}

func (c *compiler) itinerary(f *spec.Flow, it *spec.Itinerary) {
	ip := Itinerary{Name: it.Name, Flow: f.Name, Input: it.Input, At: it.Pos, Spec: it, File: f}
	for _, s := range it.Stops {
		ip.Stops = append(ip.Stops, Stop{Name: s.Name, Exchange: s.Exchange, RoutingKey: s.RoutingKey, When: s.When.Source})
	}
	c.plan.Itineraries = append(c.plan.Itineraries, ip)
}

func (c *compiler) schedule(f *spec.Flow, s *spec.Schedule) {
	send := Send{Pipeline: s.Send.Pipeline, Itinerary: s.Send.Itinerary, Saga: s.Send.Saga,
		Exchange: s.Send.Exchange, RoutingKey: s.Send.RoutingKey, Payload: s.Send.Payload}
	target := ""
	switch {
	case s.Send.Pipeline != "":
		target = "pipeline " + s.Send.Pipeline
		send.Exchange = PipelineExchange(s.Send.Pipeline) // the routing key once every file's pipelines are in (scheduleRoutes)
	case s.Send.Itinerary != "":
		target = "itinerary " + s.Send.Itinerary
	case s.Send.Saga != "":
		target = "saga " + s.Send.Saga
		send.Exchange = SagaExchange(s.Send.Saga)
	default:
		target = fmt.Sprintf("exchange %s key %s", s.Send.Exchange, s.Send.RoutingKey)
	}
	c.plan.Schedules = append(c.plan.Schedules, Schedule{Name: s.Name, Flow: f.Name, Cron: s.Cron, Every: Duration(s.Every),
		Timezone: s.Timezone, Missed: s.Missed, MissedWindow: Duration(s.MissedWindow), Target: target, Send: send, At: s.Pos})
}

// scheduleRoutes sets the routing key of the schedules that start a
// pipeline, which may be declared in another file: its first step.
func (c *compiler) scheduleRoutes() {
	for i := range c.plan.Schedules {
		s := &c.plan.Schedules[i]
		if p := c.plan.Pipeline(s.Send.Pipeline); s.Send.Pipeline != "" && p != nil && len(p.Route) > 0 {
			s.Send.RoutingKey = p.Route[0]
		}
	}
}

// brokerNames refuses names the broker would refuse when they are
// declared: over AMQP's 255 bytes (a long pipeline and step name make a
// longer retry queue name), or starting with "amq.", which RabbitMQ keeps
// for itself. Said here, in validate, rather than by the broker at start.
func (c *compiler) brokerNames() {
	check := func(kind, name string, at spec.Pos) {
		switch {
		case len(name) > 255:
			c.errorf(at, "name-too-long", "shorten the names it is made of",
				"%s name %q is %d bytes, over the 255 bytes AMQP allows", kind, name, len(name))
		case strings.HasPrefix(name, "amq."):
			c.errorf(at, "reserved-name", "choose a name that does not start with amq.",
				"%s name %q starts with amq., which RabbitMQ reserves for its own %ss", kind, name, kind)
		}
	}
	for _, q := range c.queues {
		if q.Mode == Declare {
			check("queue", q.Name, q.At)
		}
	}
	for _, e := range c.exchanges {
		if e.Mode == Declare {
			check("exchange", e.Name, e.At)
		}
	}
}

// finish sorts everything by name so the plan is the same on every run.
func (c *compiler) finish() {
	for _, e := range c.exchanges {
		c.plan.Exchanges = append(c.plan.Exchanges, *e)
	}
	for _, q := range c.queues {
		c.plan.Queues = append(c.plan.Queues, *q)
	}
	slices.SortFunc(c.plan.Exchanges, func(a, b Exchange) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(c.plan.Queues, func(a, b Queue) int { return cmp.Compare(a.Name, b.Name) })
	c.plan.Bindings = c.bindings
	slices.SortStableFunc(c.plan.Bindings, func(a, b Binding) int {
		return cmp.Or(cmp.Compare(a.Exchange, b.Exchange), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.RoutingKey, b.RoutingKey))
	})
	c.plan.Bindings = slices.CompactFunc(c.plan.Bindings, func(a, b Binding) bool {
		return a.Exchange == b.Exchange && a.Queue == b.Queue && a.RoutingKey == b.RoutingKey
	})
	slices.SortFunc(c.plan.Consumers, func(a, b Consumer) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(c.plan.Pipelines, func(a, b Pipeline) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(c.plan.Itineraries, func(a, b Itinerary) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(c.plan.Sagas, func(a, b Saga) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(c.plan.Schedules, func(a, b Schedule) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortStableFunc(c.plan.Plugins, func(a, b Plugin) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.File, b.File)) })
}
