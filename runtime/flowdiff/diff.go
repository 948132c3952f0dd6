package flowdiff

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// Side is one version of the flows: as loaded, and compiled with
// plan.Compile. Flows may be empty (no flow existed), and Plan nil then.
type Side struct {
	Flows []*spec.Flow
	Plan  *plan.Plan
	// ReadFile reads a schema file a type's $ref names, by the path
	// Flow.Dir shows joined with the $ref (slash-separated). nil: a $ref
	// is compared as written.
	ReadFile func(name string) ([]byte, error)
}

// Compare returns every change from old to new, breaking or not, sorted by
// position.
func Compare(old, new Side) Changes {
	d := &differ{old: old, new: new, op: old.Plan, np: new.Plan}
	if d.op == nil {
		d.op = &plan.Plan{}
	}
	if d.np == nil {
		d.np = &plan.Plan{}
	}
	d.oc, d.nc = consumers(d.op), consumers(d.np)
	d.oq, d.nq = queues(d.op), queues(d.np)
	d.pipelines()
	d.itineraries()
	d.sagas()
	d.plainConsumers()
	d.queueDeclarations()
	d.exchanges()
	d.bindings()
	d.types()
	d.schedules()
	d.out.sort()
	return d.out
}

type differ struct {
	old, new Side
	op, np   *plan.Plan
	oc, nc   map[string]*plan.Consumer
	oq, nq   map[string]*plan.Queue
	out      Changes
}

func consumers(p *plan.Plan) map[string]*plan.Consumer {
	m := map[string]*plan.Consumer{}
	for i := range p.Consumers {
		m[p.Consumers[i].ID] = &p.Consumers[i]
	}
	return m
}

func queues(p *plan.Plan) map[string]*plan.Queue {
	m := map[string]*plan.Queue{}
	for i := range p.Queues {
		m[p.Queues[i].Name] = &p.Queues[i]
	}
	return m
}

func (d *differ) add(c Change) { d.out = append(d.out, c) }

// owned is every queue of consumer id in p: its queue, retry rungs, .dlq
// and .parked, sorted by name (the consumed queue first).
func owned(p *plan.Plan, id string) []string {
	var qs []string
	for _, q := range p.Queues {
		if q.Owner == id {
			qs = append(qs, q.Name)
		}
	}
	// A queue provided elsewhere has another owner, or none.
	if i := slices.IndexFunc(p.Consumers, func(c plan.Consumer) bool { return c.ID == id }); i >= 0 && !slices.Contains(qs, p.Consumers[i].Queue) {
		qs = append(qs, p.Consumers[i].Queue)
	}
	slices.Sort(qs)
	return qs
}

func ownedAll(p *plan.Plan, ids ...string) []string {
	var qs []string
	for _, id := range ids {
		qs = append(qs, owned(p, id)...)
	}
	slices.Sort(qs)
	return slices.Compact(qs)
}

// what names a consumer for a sentence.
func what(c *plan.Consumer) string {
	switch {
	case c.Kind == plan.KindStep:
		return fmt.Sprintf("step %q of pipeline %q", c.Step, c.Pipeline)
	case c.Kind == plan.KindSagaTimeout:
		return fmt.Sprintf("the timeout of saga %q", c.Saga)
	case c.Compensate:
		return fmt.Sprintf("the compensation of step %q of saga %q", c.Step, c.Saga)
	case c.Saga != "":
		return fmt.Sprintf("step %q of saga %q", c.Step, c.Saga)
	}
	return fmt.Sprintf("consumer %q", c.ID)
}

// ---- pipelines

func (d *differ) pipelines() {
	for _, op := range d.op.Pipelines {
		np := d.np.Pipeline(op.Name)
		if np == nil {
			d.pipelineRemoved(op)
			continue
		}
		d.pipeline(op, *np)
	}
	for _, np := range d.np.Pipelines {
		if d.op.Pipeline(np.Name) == nil {
			d.add(Change{Kind: PipelineAdded, Pos: np.At,
				Msg:      fmt.Sprintf("pipeline %q is added, with steps %s", np.Name, strings.Join(np.Route, ", ")),
				InFlight: "nothing is in flight on it yet"})
		}
	}
}

func stepIDs(p plan.Pipeline) []string {
	ids := make([]string, len(p.Route))
	for i, s := range p.Route {
		ids[i] = plan.StepConsumerID(p.Name, s)
	}
	return ids
}

func (d *differ) pipelineRemoved(op plan.Pipeline) {
	d.add(Change{Kind: PipelineRemoved, Breaking: true, Pos: op.At, Old: true,
		Msg: fmt.Sprintf("pipeline %q is removed, with its steps %s", op.Name, strings.Join(op.Route, ", ")),
		InFlight: "messages waiting in its step queues, their retry queues and .dlq are never consumed again: " +
			"the runtime never deletes a queue, and a sender of the pipeline's exchange keeps filling them",
		Deploy: fmt.Sprintf("drain first: stop sending to pipeline %q, wait until its queues are empty "+
			"(acemq-flow inspect QUEUE --limit 0), then remove it and delete its queues", op.Name),
		Queues: ownedAll(d.op, stepIDs(op)...)})
}

func (d *differ) pipeline(op, np plan.Pipeline) {
	oldIdx, newIdx := index(op.Route), index(np.Route)
	renamed := map[string]string{} // old step -> new step
	for i, s := range op.Route {
		if _, kept := newIdx[s]; kept || i >= len(np.Route) {
			continue
		}
		if n := np.Route[i]; !has(oldIdx, n) {
			renamed[s] = n
		}
	}
	for i, s := range op.Route {
		if has(newIdx, s) {
			continue
		}
		id := plan.StepConsumerID(op.Name, s)
		oc := d.oc[id]
		// Messages before it on the route carry x-acemq-route naming it:
		// they are sent to its queue after the deploy too.
		strand := ownedAll(d.op, stepIDs(op)[:i+1]...)
		q := plan.StepQueue(op.Name, s)
		delayed := ""
		if oc != nil && oc.Delay > 0 {
			delayed = "; messages waiting in the delay ladder for it (acemq-flow delays) are delivered to it when due"
		}
		if n, ok := renamed[s]; ok {
			nc := d.nc[plan.StepConsumerID(np.Name, n)]
			d.add(Change{Kind: StepRenamed, Breaking: true, Pos: posOf(nc, np.At),
				Msg: fmt.Sprintf("step %q of pipeline %q is renamed %q: its queue changes from %q to %q", s, op.Name, n, q, plan.StepQueue(np.Name, n)),
				InFlight: fmt.Sprintf("messages waiting in %q and its retry queues are never consumed again, and messages before it on the route "+
					"carry x-acemq-route naming %q, so they are still sent to %q after the deploy%s", q, s, q, delayed),
				Deploy: fmt.Sprintf("keep the name %q (the description is free text), or deploy the renamed step beside the old one "+
					"and remove %q once %q and the queues before it are empty", s, s, q),
				Queues: strand})
			continue
		}
		d.add(Change{Kind: StepRemoved, Breaking: true, Pos: posOf(oc, op.At), Old: true,
			Msg: fmt.Sprintf("step %q of pipeline %q is removed", s, op.Name),
			InFlight: fmt.Sprintf("messages waiting in %q, its retry queues and .dlq are never consumed again, and messages before it on the route "+
				"carry x-acemq-route naming %q, so they are still sent to %q after the deploy%s", q, s, q, delayed),
			Deploy: fmt.Sprintf("drain first: stop sending to pipeline %q, wait until %q and the queues before it are empty "+
				"(acemq-flow inspect %s --limit 0), then remove the step; or keep it until then", op.Name, q, q),
			Queues: strand})
	}
	oldCommon := slices.DeleteFunc(slices.Clone(op.Route), func(s string) bool { return !has(newIdx, s) })
	newCommon := slices.DeleteFunc(slices.Clone(np.Route), func(s string) bool { return !has(oldIdx, s) })
	if !slices.Equal(oldCommon, newCommon) {
		d.add(Change{Kind: RouteReordered, Breaking: true, Pos: np.At,
			Msg: fmt.Sprintf("the steps of pipeline %q are reordered: %s → %s", np.Name, strings.Join(op.Route, ", "), strings.Join(np.Route, ", ")),
			InFlight: "messages already on the route carry x-acemq-route with the old order and follow it to its end, " +
				"so a step may be given the payload the old order gave it, of another type",
			Deploy: fmt.Sprintf("drain first: stop sending to pipeline %q and wait until its step queues are empty; "+
				"or declare the new order as a new pipeline and move its senders to it", np.Name),
			Queues: ownedAll(d.op, stepIDs(op)...)})
	}
	for i, s := range np.Route {
		if has(oldIdx, s) || slices.Contains(slices.Collect(maps.Values(renamed)), s) {
			continue
		}
		nc := d.nc[plan.StepConsumerID(np.Name, s)]
		inFlight := "messages already on the route carry x-acemq-route without it and skip it; messages sent after the deploy visit it"
		if i == 0 {
			inFlight = "messages already on the route carry x-acemq-route without it; messages sent after the deploy start at it"
		}
		d.add(Change{Kind: StepAdded, Pos: posOf(nc, np.At),
			Msg: fmt.Sprintf("step %q is added to pipeline %q", s, np.Name), InFlight: inFlight})
	}
	for _, s := range np.Route {
		if has(oldIdx, s) {
			d.settings(d.oc[plan.StepConsumerID(op.Name, s)], d.nc[plan.StepConsumerID(np.Name, s)])
		}
	}
	if od, nd := pipelineDescription(op), pipelineDescription(np); od != nd {
		d.add(Change{Kind: DescriptionChanged, Pos: np.At, Msg: fmt.Sprintf("the description of pipeline %q changes", np.Name),
			InFlight: "a description is free text and never routes"})
	}
}

func pipelineDescription(p plan.Pipeline) string {
	if p.File == nil {
		return ""
	}
	for _, sp := range p.File.Pipelines {
		if sp.Name == p.Name {
			return sp.Description
		}
	}
	return ""
}

func index(names []string) map[string]int {
	m := make(map[string]int, len(names))
	for i, n := range names {
		m[n] = i
	}
	return m
}

func has(m map[string]int, k string) bool {
	_, ok := m[k]
	return ok
}

func posOf(c *plan.Consumer, fallback spec.Pos) spec.Pos {
	if c != nil {
		return c.At
	}
	return fallback
}

// ---- settings of a consumer kept by id

// settings compares a consumer present on both sides under one id: its
// handler and settings (notices) and its retry ladder.
func (d *differ) settings(oc, nc *plan.Consumer) {
	if oc == nil || nc == nil {
		return
	}
	w := what(nc)
	notice := func(k Kind, msg, inFlight string) {
		d.add(Change{Kind: k, Pos: nc.At, Msg: msg, InFlight: inFlight})
	}
	if oc.Handler != nc.Handler {
		notice(HandlerChanged, fmt.Sprintf("%s is handled by %s instead of %s", w, nc.Handler, oc.Handler),
			"messages waiting in its queue are handled by the new handler")
	}
	if oc.Concurrency != nc.Concurrency {
		notice(ConcurrencyChanged, fmt.Sprintf("the concurrency of %s changes from %d to %d", w, oc.Concurrency, nc.Concurrency), "")
	}
	if oc.Prefetch != nc.Prefetch {
		notice(PrefetchChanged, fmt.Sprintf("the prefetch of %s changes from %d to %d", w, oc.Prefetch, nc.Prefetch), "")
	}
	if oc.AutoStartup != nc.AutoStartup {
		notice(AutoStartupChanged, fmt.Sprintf("auto_startup of %s changes from %t to %t", w, oc.AutoStartup, nc.AutoStartup),
			"a consumer that does not start leaves its messages waiting in its queue until it is started (acemq-flow consumers start)")
	}
	if oc.Idempotent != nc.Idempotent {
		inFlight := "messages delivered again after the deploy are deduplicated from then on"
		if !nc.Idempotent {
			inFlight = "a message delivered again after the deploy is handled again, even if it was handled before"
		}
		notice(IdempotentChanged, fmt.Sprintf("idempotent of %s changes from %t to %t", w, oc.Idempotent, nc.Idempotent), inFlight)
	}
	if oc.Delay != nc.Delay {
		notice(DelayChanged, fmt.Sprintf("the delay before %s changes from %s to %s", w, durationOrNone(oc.Delay), durationOrNone(nc.Delay)),
			"messages waiting in the delay ladder keep the due time they were given")
	}
	if oc.Description != nc.Description {
		notice(DescriptionChanged, fmt.Sprintf("the description of %s changes", w), "a description is free text and never routes")
	}
	if oc.Queue != nc.Queue {
		return // the queue moved: reported by the caller; the ladders are not comparable
	}
	d.ladder(oc, nc)
}

// ladder reports retry rungs the new ladder no longer declares, or a
// changed ladder that keeps them all.
func (d *differ) ladder(oc, nc *plan.Consumer) {
	rungs := func(p *plan.Plan, id string) []string {
		var qs []string
		for _, q := range p.Queues {
			if q.Owner == id && q.Purpose == "retry" {
				qs = append(qs, q.Name)
			}
		}
		return qs
	}
	nr := rungs(d.np, nc.ID)
	orphaned := slices.DeleteFunc(rungs(d.op, oc.ID), func(q string) bool { return slices.Contains(nr, q) })
	change := ""
	if ladderText(oc.Retry) != ladderText(nc.Retry) {
		change = fmt.Sprintf(" (%s → %s)", ladderText(oc.Retry), ladderText(nc.Retry))
	}
	if len(orphaned) > 0 {
		msg := fmt.Sprintf("the retry ladder of %s changes%s and no longer declares %s", what(nc), change, queueList(orphaned))
		if change == "" && oc.Idempotent && !nc.Idempotent {
			msg = fmt.Sprintf("%s is no longer idempotent, so its in-progress rung %q is no longer declared", what(nc), orphaned[0])
		}
		d.add(Change{Kind: RetryRungsOrphaned, Breaking: true, Pos: nc.At, Msg: msg,
			InFlight: fmt.Sprintf("messages waiting there still go back to %q when their TTL ends, but the queues stay on the broker, "+
				"unmanaged, until someone deletes them", nc.Queue),
			Deploy: "deploy, then delete each one once it is empty (acemq-flow inspect QUEUE --limit 0 shows its depth); " +
				"deleting one sooner drops the messages waiting in it",
			Queues: orphaned})
		return
	}
	if change != "" {
		inFlight := "messages waiting in a retry queue keep their delay; their next failure takes the new ladder"
		if nc.Retry.MaxAttempts < oc.Retry.MaxAttempts {
			inFlight += fmt.Sprintf(", so a message past attempt %d is dead-lettered at its next failure", nc.Retry.MaxAttempts)
		}
		d.add(Change{Kind: RetryChanged, Pos: nc.At, Msg: fmt.Sprintf("the retry ladder of %s changes%s", what(nc), change), InFlight: inFlight})
	}
}

func ladderText(r plan.Retry) string {
	if r.MaxAttempts <= 1 {
		return "max_attempts 1, no retry"
	}
	delays := make([]string, len(r.Rungs))
	for i, g := range r.Rungs {
		delays[i] = plan.DelayName(time.Duration(g.Delay))
	}
	return fmt.Sprintf("max_attempts %d, delays %s, jitter %g", r.MaxAttempts, strings.Join(delays, " "), r.Jitter)
}

// ---- itineraries

func (d *differ) itineraries() {
	for _, oi := range d.op.Itineraries {
		ni := d.np.Itinerary(oi.Name)
		if ni == nil {
			d.add(Change{Kind: ItineraryRemoved, Breaking: true, Pos: oi.At, Old: true,
				Msg: fmt.Sprintf("itinerary %q is removed", oi.Name),
				InFlight: "messages on their way carry their routing slip and finish it while the consumers of its stops run; " +
					"whatever sends to the itinerary by name (acemq-flow send --itinerary, a schedule, a client) can no longer start one",
				Deploy: fmt.Sprintf("move the senders off itinerary %q first; keep the consumers of its stops until its queues are empty", oi.Name),
				Queues: d.stopQueues(oi.Stops)})
			continue
		}
		d.itinerary(oi, *ni)
	}
	for _, ni := range d.np.Itineraries {
		if d.op.Itinerary(ni.Name) == nil {
			d.add(Change{Kind: ItineraryAdded, Pos: ni.At, Msg: fmt.Sprintf("itinerary %q is added", ni.Name),
				InFlight: "nothing is in flight on it yet"})
		}
	}
}

// stopQueues are the queues bound to the stops' exchanges and routing keys
// in the old plan, with their ladders: where carried slips wait.
func (d *differ) stopQueues(stops []plan.Stop) []string {
	types := map[string]string{}
	for _, e := range d.op.Exchanges {
		types[e.Name] = e.Type
	}
	var ids []string
	for _, s := range stops {
		for _, b := range d.op.Bindings {
			if b.Exchange == s.Exchange && b.Queue != "" && routes(types[b.Exchange], b.RoutingKey, s.RoutingKey) {
				if q := d.oq[b.Queue]; q != nil && q.Owner != "" {
					ids = append(ids, q.Owner)
				}
			}
		}
	}
	return ownedAll(d.op, ids...)
}

// routes reports whether a binding with key binding routes a message
// published with key key: topic patterns (`*` one word, `#` any number) on
// a topic exchange, the same key otherwise. An exchange no loaded flow
// declares has no type here; it is taken as topic when the binding is a
// pattern, so that no queue the slips may reach is left out.
func routes(exchangeType, binding, key string) bool {
	if binding == key {
		return true
	}
	if exchangeType != "topic" && (exchangeType != "" || !strings.ContainsAny(binding, "*#")) {
		return false
	}
	return topicMatch(strings.Split(binding, "."), strings.Split(key, "."))
}

func topicMatch(pattern, words []string) bool {
	if len(pattern) == 0 {
		return len(words) == 0
	}
	switch pattern[0] {
	case "#":
		for i := 0; i <= len(words); i++ {
			if topicMatch(pattern[1:], words[i:]) {
				return true
			}
		}
		return false
	case "*":
		return len(words) > 0 && topicMatch(pattern[1:], words[1:])
	}
	return len(words) > 0 && pattern[0] == words[0] && topicMatch(pattern[1:], words[1:])
}

func stopPos(it plan.Itinerary, name string) spec.Pos {
	if it.Spec != nil {
		for _, s := range it.Spec.Stops {
			if s.Name == name {
				return s.Pos
			}
		}
	}
	return it.At
}

func stopNames(stops []plan.Stop) []string {
	names := make([]string, len(stops))
	for i, s := range stops {
		names[i] = s.Name
	}
	return names
}

func (d *differ) itinerary(oi, ni plan.Itinerary) {
	on, nn := stopNames(oi.Stops), stopNames(ni.Stops)
	oldIdx, newIdx := index(on), index(nn)
	strand := d.stopQueues(oi.Stops)
	renamed := map[string]string{}
	for i, s := range on {
		if !has(newIdx, s) && i < len(nn) && !has(oldIdx, nn[i]) {
			renamed[s] = nn[i]
		}
	}
	for i, s := range oi.Stops {
		if has(newIdx, s.Name) {
			continue
		}
		inFlight := fmt.Sprintf("messages on their way carry a routing slip that still lists %q, and a carried slip wins over the declared "+
			"itinerary: they are still sent to exchange %q with key %q", s.Name, s.Exchange, s.RoutingKey)
		deploy := fmt.Sprintf("keep a consumer of exchange %q key %q until no message with the old slip is left in the itinerary's queues, "+
			"then remove it", s.Exchange, s.RoutingKey)
		if n, ok := renamed[s.Name]; ok {
			ns := ni.Stops[i]
			d.add(Change{Kind: StopRenamed, Breaking: true, Pos: stopPos(ni, n),
				Msg:      fmt.Sprintf("stop %q of itinerary %q is renamed %q", s.Name, oi.Name, n),
				InFlight: inFlight + fmt.Sprintf(", and the slip's done list names %q", s.Name),
				Deploy:   sameTarget(s, ns, deploy), Queues: strand})
			continue
		}
		d.add(Change{Kind: StopRemoved, Breaking: true, Pos: stopPos(oi, s.Name), Old: true,
			Msg: fmt.Sprintf("stop %q of itinerary %q is removed", s.Name, oi.Name), InFlight: inFlight, Deploy: deploy, Queues: strand})
	}
	for _, ns := range ni.Stops {
		i, ok := oldIdx[ns.Name]
		if !ok {
			if !slices.Contains(slices.Collect(maps.Values(renamed)), ns.Name) {
				d.add(Change{Kind: StopAdded, Pos: stopPos(ni, ns.Name), Msg: fmt.Sprintf("stop %q is added to itinerary %q", ns.Name, ni.Name),
					InFlight: "messages on their way carry their slip without it; messages sent after the deploy visit it when its when allows"})
			}
			continue
		}
		os := oi.Stops[i]
		if os.Exchange != ns.Exchange || os.RoutingKey != ns.RoutingKey {
			d.add(Change{Kind: StopMoved, Breaking: true, Pos: stopPos(ni, ns.Name),
				Msg: fmt.Sprintf("stop %q of itinerary %q now goes to exchange %q key %q instead of exchange %q key %q",
					ns.Name, ni.Name, ns.Exchange, ns.RoutingKey, os.Exchange, os.RoutingKey),
				InFlight: fmt.Sprintf("messages on their way carry the old slip and are still sent to exchange %q with key %q", os.Exchange, os.RoutingKey),
				Deploy: fmt.Sprintf("keep a consumer of exchange %q key %q until no message with the old slip is left in the itinerary's queues",
					os.Exchange, os.RoutingKey),
				Queues: strand})
		}
		if os.When != ns.When {
			d.add(Change{Kind: StopConditionChange, Pos: stopPos(ni, ns.Name),
				Msg:      fmt.Sprintf("the when of stop %q of itinerary %q changes from %q to %q", ns.Name, ni.Name, os.When, ns.When),
				InFlight: "a slip is decided when its message starts: messages on their way keep the stops they were given"})
		}
	}
	oldCommon := slices.DeleteFunc(slices.Clone(on), func(s string) bool { return !has(newIdx, s) })
	newCommon := slices.DeleteFunc(slices.Clone(nn), func(s string) bool { return !has(oldIdx, s) })
	if !slices.Equal(oldCommon, newCommon) {
		d.add(Change{Kind: RouteReordered, Breaking: true, Pos: ni.At,
			Msg: fmt.Sprintf("the stops of itinerary %q are reordered: %s → %s", ni.Name, strings.Join(on, ", "), strings.Join(nn, ", ")),
			InFlight: "messages on their way carry their slip in the old order and finish it in that order; " +
				"only messages started after the deploy take the new one",
			Deploy: fmt.Sprintf("if no message may visit the stops in the old order after the deploy, drain first: "+
				"stop sending to itinerary %q and wait until its stops' queues are empty", ni.Name),
			Queues: strand})
	}
}

// sameTarget keeps the deploy advice of a renamed stop short when it still
// goes where it went.
func sameTarget(os, ns plan.Stop, deploy string) string {
	if os.Exchange == ns.Exchange && os.RoutingKey == ns.RoutingKey {
		return "it still goes to the same exchange and key, so the messages arrive; deploy once nothing reads the slip's stop names, " +
			"or keep the name " + fmt.Sprintf("%q", os.Name)
	}
	return deploy
}

// ---- sagas

func (d *differ) sagas() {
	for _, os := range d.op.Sagas {
		ns := d.np.Saga(os.Name)
		if ns == nil {
			d.add(Change{Kind: SagaRemoved, Breaking: true, Pos: os.At, Old: true,
				Msg: fmt.Sprintf("saga %q is removed", os.Name),
				InFlight: "its running instances can neither go on nor compensate: messages waiting in its step and compensation queues " +
					"are never consumed again",
				Deploy: fmt.Sprintf("drain first: stop starting saga %q, wait until `acemq-flow sagas list --saga %s --state running` shows "+
					"none and its queues are empty, then remove it", os.Name, os.Name),
				Queues: ownedAll(d.op, sagaIDs(os)...)})
			continue
		}
		d.saga(os, *ns)
	}
	for _, ns := range d.np.Sagas {
		if d.op.Saga(ns.Name) == nil {
			d.add(Change{Kind: SagaAdded, Pos: ns.At, Msg: fmt.Sprintf("saga %q is added", ns.Name), InFlight: "nothing is in flight on it yet"})
		}
	}
}

func sagaIDs(s plan.Saga) []string {
	var ids []string
	for _, st := range s.Steps {
		ids = append(ids, plan.SagaStepConsumerID(s.Name, st.Name))
		if st.Compensation != "" {
			ids = append(ids, plan.CompensateConsumerID(s.Name, st.Name))
		}
	}
	if s.TimeoutQueue != "" {
		ids = append(ids, plan.TimeoutConsumerID(s.Name))
	}
	return ids
}

func sagaStepPos(s plan.Saga, name string, compensate bool) spec.Pos {
	if s.Spec != nil {
		for _, st := range s.Spec.Steps {
			if st.Name == name {
				if compensate && st.CompensatePos.Line > 0 {
					return st.CompensatePos
				}
				return st.Pos
			}
		}
	}
	return s.At
}

func sagaStepNames(s plan.Saga) []string {
	names := make([]string, len(s.Steps))
	for i, st := range s.Steps {
		names[i] = st.Name
	}
	return names
}

func (d *differ) saga(os, ns plan.Saga) {
	on, nn := sagaStepNames(os), sagaStepNames(ns)
	oldIdx, newIdx := index(on), index(nn)
	drain := fmt.Sprintf("drain first: stop starting saga %q and wait until `acemq-flow sagas list --saga %s --state running` "+
		"shows none and its queues are empty", os.Name, os.Name)
	for i, s := range on {
		if has(newIdx, s) {
			continue
		}
		ids := []string{plan.SagaStepConsumerID(os.Name, s)}
		if os.Steps[i].Compensation != "" {
			ids = append(ids, plan.CompensateConsumerID(os.Name, s))
		}
		strand := ownedAll(d.op, sagaIDs(os)...)
		if i < len(nn) && !has(oldIdx, nn[i]) {
			d.add(Change{Kind: SagaStepRenamed, Breaking: true, Pos: sagaStepPos(ns, nn[i], false),
				Msg: fmt.Sprintf("step %q of saga %q is renamed %q: its queue changes from %q to %q", s, os.Name, nn[i],
					plan.SagaStepQueue(os.Name, s), plan.SagaStepQueue(ns.Name, nn[i])),
				InFlight: fmt.Sprintf("the message of an instance running at the step waits in %q, and its compensation's in the old "+
					"compensation queue: neither is consumed again, so the instance never ends; instances that reach the step after the "+
					"deploy run it under the new name", plan.SagaStepQueue(os.Name, s)),
				Deploy: drain + fmt.Sprintf("; or keep the name %q", s), Queues: strand})
			continue
		}
		d.add(Change{Kind: SagaStepRemoved, Breaking: true, Pos: sagaStepPos(os, s, false), Old: true,
			Msg: fmt.Sprintf("step %q of saga %q is removed", s, os.Name),
			InFlight: "an instance keeps the records of the steps it started with, by position: one running at the deploy " +
				"finds its records no longer line up with the saga's steps, one at the step or past it cannot compensate it, " +
				"and messages waiting in " + queueList(ownedAll(d.op, ids...)) + " are never consumed again",
			Deploy: drain + ", then remove the step", Queues: strand})
	}
	for i, s := range nn {
		if has(oldIdx, s) || i < len(on) && !has(newIdx, on[i]) {
			continue
		}
		// An instance keeps one record per step of the saga it started
		// under, by position, and the runtime reads the record at the
		// position of the step's name in the saga as deployed.
		d.add(Change{Kind: SagaStepAdded, Breaking: true, Pos: sagaStepPos(ns, s, false),
			Msg: fmt.Sprintf("step %q is added to saga %q", s, ns.Name),
			InFlight: "an instance keeps the records of the steps it started with, by position, and the runtime finds a step's record " +
				"at its position in the saga as deployed: an instance running at the deploy has no record for the new step " +
				"and is dead-lettered when it reaches it, or the records after it no longer line up",
			Deploy: drain + "; instances started after the deploy run the new step", Queues: ownedAll(d.op, sagaIDs(os)...)})
	}
	oldCommon := slices.DeleteFunc(slices.Clone(on), func(s string) bool { return !has(newIdx, s) })
	newCommon := slices.DeleteFunc(slices.Clone(nn), func(s string) bool { return !has(oldIdx, s) })
	if !slices.Equal(oldCommon, newCommon) {
		d.add(Change{Kind: RouteReordered, Breaking: true, Pos: ns.At,
			Msg: fmt.Sprintf("the steps of saga %q are reordered: %s → %s", ns.Name, strings.Join(on, ", "), strings.Join(nn, ", ")),
			InFlight: "instances running now were started under the old order: after the deploy they may skip a step or run one twice, " +
				"and compensate in an order their steps did not run in",
			Deploy: drain, Queues: ownedAll(d.op, sagaIDs(os)...)})
	}
	for _, nst := range ns.Steps {
		i, ok := oldIdx[nst.Name]
		if !ok {
			continue
		}
		ost := os.Steps[i]
		oid, cid := plan.SagaStepConsumerID(os.Name, ost.Name), plan.CompensateConsumerID(os.Name, ost.Name)
		switch {
		case ost.Compensation != "" && nst.Compensation == "":
			d.add(Change{Kind: CompensationRemoved, Breaking: true, Pos: sagaStepPos(ns, nst.Name, false),
				Msg: fmt.Sprintf("step %q of saga %q no longer has a compensation (it was %s)", nst.Name, ns.Name, ost.Compensate),
				InFlight: fmt.Sprintf("instances that compensate after the deploy cannot undo %q, and messages waiting in %q "+
					"are never consumed again", nst.Name, ost.Compensation),
				Deploy: drain + ", then remove the compensation", Queues: ownedAll(d.op, cid)})
		case ost.Compensation == "" && nst.Compensation != "":
			d.add(Change{Kind: CompensationAdded, Pos: sagaStepPos(ns, nst.Name, true),
				Msg:      fmt.Sprintf("step %q of saga %q gets a compensation, %s", nst.Name, ns.Name, nst.Compensate),
				InFlight: "instances that compensate after the deploy undo it too"})
		case ost.Compensation != "":
			d.settings(d.oc[cid], d.nc[plan.CompensateConsumerID(ns.Name, nst.Name)])
		}
		d.settings(d.oc[oid], d.nc[plan.SagaStepConsumerID(ns.Name, nst.Name)])
	}
	if os.Timeout != ns.Timeout {
		d.add(Change{Kind: SagaTimeoutChanged, Pos: ns.At,
			Msg:      fmt.Sprintf("the timeout of saga %q changes from %s to %s", ns.Name, durationOrNone(os.Timeout), durationOrNone(ns.Timeout)),
			InFlight: "instances running now keep the timeout message they were given when they started"})
	}
}

func durationOrNone(d plan.Duration) string {
	if d == 0 {
		return "none"
	}
	return plan.DelayName(time.Duration(d))
}

// ---- consumers

func (d *differ) plainConsumers() {
	newByQueue := map[string]*plan.Consumer{}
	for _, c := range d.nc {
		if c.Kind == plan.KindConsumer {
			newByQueue[c.Queue] = c
		}
	}
	oldIDs := map[string]bool{}
	for _, oc := range d.op.Consumers {
		if oc.Kind != plan.KindConsumer {
			continue
		}
		oldIDs[oc.ID] = true
		nc := d.nc[oc.ID]
		switch {
		case nc != nil && nc.Kind == plan.KindConsumer && nc.Queue != oc.Queue:
			d.add(Change{Kind: ConsumerQueueMoved, Breaking: true, Pos: nc.At,
				Msg:      fmt.Sprintf("consumer %q now consumes queue %q instead of %q", oc.ID, nc.Queue, oc.Queue),
				InFlight: fmt.Sprintf("messages waiting in %q and its retry queues are never consumed again", oc.Queue),
				Deploy: fmt.Sprintf("keep a consumer of %q (under another id) until it is empty, and stop its publishers first; "+
					"then remove it", oc.Queue),
				Queues: owned(d.op, oc.ID)})
			d.settings(&oc, nc)
		case nc != nil && nc.Kind == plan.KindConsumer:
			d.settings(&oc, nc)
		case newByQueue[oc.Queue] != nil && d.oc[newByQueue[oc.Queue].ID] == nil:
			nc := newByQueue[oc.Queue]
			ch := Change{Kind: ConsumerRenamed, Pos: nc.At,
				Msg:      fmt.Sprintf("consumer %q is renamed %q (the same queue %q)", oc.ID, nc.ID, oc.Queue),
				InFlight: "its messages are consumed under the new id; the registry (acemq-flow consumers) and its metrics name the new id"}
			if oc.Idempotent || nc.Idempotent {
				ch.Breaking = true
				ch.InFlight = fmt.Sprintf("the idempotency store keys each message on the consumer id, so a message that %q handled and that "+
					"is delivered again after the deploy (a redelivery, a retry, a replay) is handled again by %q", oc.ID, nc.ID)
				ch.Deploy = fmt.Sprintf("keep the id %q, or deploy once %q, its retry queues and .dlq are empty", oc.ID, oc.Queue)
				ch.Queues = owned(d.op, oc.ID)
			}
			d.add(ch)
			d.settings(&oc, nc)
		default:
			d.add(Change{Kind: ConsumerRemoved, Breaking: true, Pos: oc.At, Old: true,
				Msg: fmt.Sprintf("consumer %q of queue %q is removed", oc.ID, oc.Queue),
				InFlight: fmt.Sprintf("messages waiting in %q, its retry queues and .dlq are never consumed again: "+
					"the runtime never deletes a queue, and its publishers keep filling it", oc.Queue),
				Deploy: fmt.Sprintf("drain first: stop its publishers, wait until %q is empty (acemq-flow inspect %s --limit 0), "+
					"then remove the consumer; or keep it", oc.Queue, oc.Queue),
				Queues: owned(d.op, oc.ID)})
		}
	}
	for _, nc := range d.np.Consumers {
		if nc.Kind != plan.KindConsumer || d.oc[nc.ID] != nil {
			continue
		}
		if oc := d.consumerOfQueue(d.op, nc.Queue); oc != nil && !d.keeps(oc.ID) {
			continue // reported as a rename
		}
		d.add(Change{Kind: ConsumerAdded, Pos: nc.At, Msg: fmt.Sprintf("consumer %q of queue %q is added", nc.ID, nc.Queue),
			InFlight: "messages already waiting in its queue, if it exists, are consumed once it starts"})
	}
}

func (d *differ) consumerOfQueue(p *plan.Plan, queue string) *plan.Consumer {
	for i := range p.Consumers {
		if c := &p.Consumers[i]; c.Kind == plan.KindConsumer && c.Queue == queue {
			return c
		}
	}
	return nil
}

func (d *differ) keeps(id string) bool { return d.nc[id] != nil }

// ---- queue declarations

// queueDeclarations compares every queue both plans declare: a change of
// type or arguments is refused by the broker at the redeclare. Retry
// rungs, .dlq and .parked follow their queue and are named with it.
func (d *differ) queueDeclarations() {
	for _, nq := range d.np.Queues {
		oq := d.oq[nq.Name]
		if oq == nil {
			if nq.Purpose == "declared" && nq.Owner == "" {
				d.add(Change{Kind: QueueAdded, Pos: nq.At, Msg: fmt.Sprintf("queue %q is declared", nq.Name),
					InFlight: "it is created at the next start if it does not exist"})
			}
			continue
		}
		if oq.Mode != plan.Declare || nq.Mode != plan.Declare || skipQueue(nq.Purpose) {
			continue
		}
		desc := d.describeQueue(nq)
		followers := d.followers(nq)
		n := len(d.out)
		if oq.Type != nq.Type {
			also := ""
			if len(followers) > 0 {
				also = fmt.Sprintf(", and so do its %s", queueList(followers))
			}
			d.add(Change{Kind: QueueTypeChanged, Breaking: true, Pos: nq.At,
				Msg: fmt.Sprintf("%s changes type from %s to %s%s: the broker refuses to redeclare a queue with another x-queue-type "+
					"(PRECONDITION_FAILED), so the runtime does not start (apply: create-only and validate report the drift)", desc, oq.Type, nq.Type, also),
				InFlight: "the queue keeps its messages under the old type, and nothing consumes them while the runtime cannot start",
				Deploy: fmt.Sprintf("give it a new name (rename the step or the queue) and drain the old one beside it; or drain it, "+
					"stop the runtime, delete %q and its retry queues, then deploy; or keep %s", nq.Name, oq.Type)})
			continue
		}
		if diff := argumentDiff(oq.Arguments, nq.Arguments); diff != "" {
			d.add(Change{Kind: QueueArgsChanged, Breaking: true, Pos: nq.At,
				Msg: fmt.Sprintf("the arguments of %s change (%s): the broker refuses to redeclare a queue with other arguments "+
					"(PRECONDITION_FAILED), so the runtime does not start (apply: create-only and validate report the drift)", desc, diff),
				InFlight: "the queue keeps its messages under the old arguments, and nothing consumes them while the runtime cannot start",
				Deploy: fmt.Sprintf("give it a new name and drain the old one beside it; or drain it, stop the runtime, delete %q, "+
					"then deploy; or set what can be changed live as a policy (rabbitmqctl set_policy) instead of an argument", nq.Name)})
		}
		if len(d.out) > n && nq.Apply == spec.ApplyDryRun {
			dryRun(&d.out[n], "queue")
		}
	}
	for _, oq := range d.op.Queues {
		if d.nq[oq.Name] == nil && oq.Purpose == "declared" && (oq.Owner == "" || d.nc[oq.Owner] != nil) {
			d.add(Change{Kind: QueueRemoved, Pos: oq.At, Old: true, Msg: fmt.Sprintf("queue %q is no longer declared", oq.Name),
				InFlight: "it stays on the broker with its messages: the runtime never deletes a queue",
				Deploy:   "delete it by hand once nothing publishes to it and it is empty"})
		}
	}
}

// dryRun makes a refused redeclare a notice: under `apply: dry-run` the
// runtime declares nothing of the file, so nothing is refused.
func dryRun(c *Change, what string) {
	c.Msg, _, _ = strings.Cut(c.Msg, ": the broker refuses")
	c.Breaking, c.Queues, c.Deploy = false, nil, ""
	c.InFlight = fmt.Sprintf("its file has apply: dry-run, so the runtime declares nothing and starts; the %s on the broker keeps "+
		"its old declaration until someone changes it", what)
}

func skipQueue(purpose string) bool {
	return purpose == "retry" || purpose == "dlq" || purpose == "parked"
}

// followers are the retry rungs of queue q in the new plan: declared with
// its type, so they change with it.
func (d *differ) followers(q plan.Queue) []string {
	var qs []string
	for _, r := range d.np.Queues {
		if r.Purpose == "retry" && r.Owner != "" && r.Owner == q.Owner && d.oq[r.Name] != nil && d.oq[r.Name].Type != r.Type {
			qs = append(qs, r.Name)
		}
	}
	return qs
}

func (d *differ) describeQueue(q plan.Queue) string {
	if c := d.nc[q.Owner]; c != nil && c.Queue == q.Name {
		return fmt.Sprintf("queue %q of %s", q.Name, what(c))
	}
	if q.Purpose == "declared" {
		return fmt.Sprintf("queue %q", q.Name)
	}
	return fmt.Sprintf("queue %q (%s)", q.Name, q.Purpose)
}

// argumentDiff describes how two argument tables differ, ignoring
// x-queue-type (a type change is its own change); "" when they agree.
func argumentDiff(old, new map[string]any) string {
	keys := map[string]bool{}
	for k := range old {
		keys[k] = true
	}
	for k := range new {
		keys[k] = true
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if k == "x-queue-type" {
			continue
		}
		ov, oin := old[k]
		nv, nin := new[k]
		switch {
		case !oin:
			parts = append(parts, fmt.Sprintf("%s %s added", k, argText(nv)))
		case !nin:
			parts = append(parts, fmt.Sprintf("%s %s removed", k, argText(ov)))
		case !reflect.DeepEqual(ov, nv):
			parts = append(parts, fmt.Sprintf("%s %s → %s", k, argText(ov), argText(nv)))
		}
	}
	return strings.Join(parts, ", ")
}

func argText(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}

// ---- exchanges and bindings

func (d *differ) exchanges() {
	oe := map[string]plan.Exchange{}
	for _, e := range d.op.Exchanges {
		oe[e.Name] = e
	}
	ne := map[string]bool{}
	for _, n := range d.np.Exchanges {
		ne[n.Name] = true
		o, ok := oe[n.Name]
		if !ok {
			if n.Purpose == "declared" {
				d.add(Change{Kind: ExchangeAdded, Pos: n.At, Msg: fmt.Sprintf("exchange %q (%s) is declared", n.Name, n.Type),
					InFlight: "it is created at the next start if it does not exist"})
			}
			continue
		}
		if o.Mode == plan.Declare && n.Mode == plan.Declare && o.Type != "" && n.Type != "" && o.Type != n.Type {
			c := Change{Kind: ExchangeTypeChanged, Breaking: true, Pos: n.At,
				Msg: fmt.Sprintf("exchange %q changes type from %s to %s: the broker refuses to redeclare an exchange with another type "+
					"(PRECONDITION_FAILED), so the runtime does not start", n.Name, o.Type, n.Type),
				InFlight: "the exchange keeps routing as a " + o.Type + " exchange, with its bindings, until it is deleted",
				Deploy: "declare the new type under a new exchange name and move the bindings and publishers to it; or delete and recreate " +
					"it while nothing publishes (deleting an exchange drops its bindings, and what is published meanwhile is lost)"}
			if n.Apply == spec.ApplyDryRun {
				dryRun(&c, "exchange")
			}
			d.add(c)
		}
	}
	for _, o := range d.op.Exchanges {
		if !ne[o.Name] && o.Purpose == "declared" {
			d.add(Change{Kind: ExchangeRemoved, Pos: o.At, Old: true, Msg: fmt.Sprintf("exchange %q is no longer declared", o.Name),
				InFlight: "it stays on the broker with its bindings: the runtime never deletes an exchange"})
		}
	}
}

type bindingKey struct{ exchange, queue, key string }

// bindings compares the bindings consumers ask for (`bind:`) of consumers
// kept with their queue; the bindings of steps and of removed consumers go
// with them.
func (d *differ) bindings() {
	keyOf := func(b plan.Binding) bindingKey { return bindingKey{b.Exchange, b.Queue, b.RoutingKey} }
	kept := func(b plan.Binding, mine, theirs map[string]*plan.Consumer) bool {
		c, o := mine[b.Owner], theirs[b.Owner]
		return c != nil && o != nil && c.Kind == plan.KindConsumer && o.Kind == plan.KindConsumer && c.Queue == b.Queue && o.Queue == b.Queue
	}
	nb, ob := map[bindingKey]bool{}, map[bindingKey]bool{}
	for _, b := range d.np.Bindings {
		nb[keyOf(b)] = true
	}
	for _, b := range d.op.Bindings {
		ob[keyOf(b)] = true
	}
	for _, b := range d.op.Bindings {
		if b.Queue == "" || b.Exchange == plan.DeadLetterExchange || nb[keyOf(b)] || !kept(b, d.oc, d.nc) {
			continue
		}
		d.add(Change{Kind: BindingRemoved, Breaking: true, Pos: b.At, Old: true,
			Msg: fmt.Sprintf("consumer %q no longer binds queue %q to exchange %q with key %q", b.Owner, b.Queue, b.Exchange, b.RoutingKey),
			InFlight: fmt.Sprintf("the runtime never unbinds: where the binding exists it keeps routing messages with key %q into %q until "+
				"someone removes it; where it does not, publishers sending with that key reach no queue (returned to a mandatory "+
				"publisher, dropped otherwise)", b.RoutingKey, b.Queue),
			Deploy: fmt.Sprintf("move the publishers that send to %q with key %q first, then remove the binding by hand "+
				"(rabbitmqctl or the management UI)", b.Exchange, b.RoutingKey)})
	}
	for _, b := range d.np.Bindings {
		if b.Queue == "" || b.Exchange == plan.DeadLetterExchange || ob[keyOf(b)] || !kept(b, d.nc, d.oc) {
			continue
		}
		d.add(Change{Kind: BindingAdded, Pos: b.At,
			Msg:      fmt.Sprintf("consumer %q binds queue %q to exchange %q with key %q", b.Owner, b.Queue, b.Exchange, b.RoutingKey),
			InFlight: "the binding is made at the next start; messages published with that key from then on reach the queue"})
	}
}

// ---- schedules

func (d *differ) schedules() {
	ns := map[string]plan.Schedule{}
	for _, s := range d.np.Schedules {
		ns[s.Key()] = s
	}
	os := map[string]bool{}
	for _, o := range d.op.Schedules {
		os[o.Key()] = true
		n, ok := ns[o.Key()]
		if !ok {
			d.add(Change{Kind: ScheduleRemoved, Pos: o.At, Old: true, Msg: fmt.Sprintf("schedule %q of flow %q is removed", o.Name, o.Flow),
				InFlight: "firings already sent are delivered; no runtime fires it again"})
			continue
		}
		o.At, n.At = spec.Pos{}, spec.Pos{}
		if !reflect.DeepEqual(o, n) {
			d.add(Change{Kind: ScheduleChanged, Pos: ns[o.Key()].At, Msg: fmt.Sprintf("schedule %q of flow %q changes", n.Name, n.Flow),
				InFlight: "firings already sent are delivered as they were; the next tick follows the new schedule"})
		}
	}
	for _, n := range d.np.Schedules {
		if !os[n.Key()] {
			d.add(Change{Kind: ScheduleAdded, Pos: n.At, Msg: fmt.Sprintf("schedule %q of flow %q is added", n.Name, n.Flow),
				InFlight: "it fires from its next tick on"})
		}
	}
}
