package spec

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

var (
	noField    = regexp.MustCompile(`^type .* has no field (\S+)$`)
	wireName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]*$`)
	retrySufx  = regexp.MustCompile(`\.retry\.[0-9]+(ms|s|m|h)$`)
	reservedSx = []string{".dlq", ".parked", ".compensate"}
)

// ReservedSuffix returns the reserved wire suffix name ends in (".dlq",
// ".parked", ".compensate" or ".retry.<delay>"), or "".
func ReservedSuffix(name string) string {
	for _, s := range reservedSx {
		if strings.HasSuffix(name, s) {
			return s
		}
	}
	if m := retrySufx.FindString(name); m != "" {
		return m
	}
	return ""
}

// checkFile runs the semantic checks of one file: names, handlers, types,
// the type flow, and `when` expressions.
func checkFile(f *Flow, tc *typeCompiler, d *diags) {
	c := fileChecker{f: f, d: d}
	c.names()
	c.compileTypes(tc)
	for _, p := range f.Pipelines {
		c.pipeline(p)
	}
	for _, it := range f.Itineraries {
		c.itinerary(it)
	}
	for _, cs := range f.Consumers {
		c.consumer(cs)
	}
	for _, s := range f.Sagas {
		c.saga(s)
	}
	for _, s := range f.Schedules {
		c.schedule(s)
	}
	for _, q := range f.Topology.Queues {
		c.queueArgs(q)
	}
}

type fileChecker struct {
	f *Flow
	d *diags
}

func (c *fileChecker) name(pos Pos, what, name string) {
	if name == "" {
		return // reported by the schema
	}
	if !wireName.MatchString(name) {
		c.d.errorf(pos, "invalid-name", "use letters, digits, dashes and dots, starting with a letter or digit",
			"%s name %q cannot be used on the wire", what, name)
	}
}

// routingKey refuses a key over 255 bytes: AMQP carries it as a short
// string (the schema counts characters, and é is two bytes).
func (c *fileChecker) routingKey(pos Pos, key string) {
	if len(key) > 255 {
		c.d.errorf(pos, "out-of-range", "shorten it", "routing key %.40q… is %d bytes long; AMQP carries at most 255", key, len(key))
	}
}

func (c *fileChecker) names() {
	c.name(c.f.Pos, "flow", c.f.Name)
	for _, it := range c.f.Itineraries {
		for _, s := range it.Stops {
			c.routingKey(s.Pos, s.RoutingKey)
		}
	}
	for _, cs := range c.f.Consumers {
		for _, b := range cs.Bind {
			c.routingKey(b.Pos, b.RoutingKey)
		}
	}
	for _, s := range c.f.Schedules {
		c.routingKey(s.Send.Pos, s.Send.RoutingKey)
	}
	for _, p := range c.f.Pipelines {
		c.name(p.Pos, "pipeline", p.Name)
		seen := map[string]*Step{}
		for _, s := range p.Steps {
			c.name(s.Pos, "step", s.Name)
			if sx := ReservedSuffix("." + s.Name); sx != "" {
				c.d.errorf(s.Pos, "reserved-suffix", "rename the step; "+sx+" names the runtime's own queues",
					"step %q makes the queue %q, which ends in the reserved suffix %q", s.Name, p.Name+"."+s.Name, sx)
			}
			if prev, ok := seen[s.Name]; ok {
				c.d.errorf(s.Pos, "duplicate-step", "give each step of a pipeline its own name",
					"pipeline %q has two steps named %q (the first at %s)", p.Name, s.Name, prev.Pos)
			}
			seen[s.Name] = s
		}
	}
	for _, it := range c.f.Itineraries {
		c.name(it.Pos, "itinerary", it.Name)
		for _, s := range it.Stops {
			c.name(s.Pos, "stop", s.Name)
		}
	}
	for _, cs := range c.f.Consumers {
		c.name(cs.Pos, "consumer id", cs.ID)
		c.name(cs.QueuePos, "queue", cs.Queue)
	}
	for _, s := range c.f.Sagas {
		c.name(s.Pos, "saga", s.Name)
		seen := map[string]*SagaStep{}
		for _, st := range s.Steps {
			c.name(st.Pos, "saga step", st.Name)
			if sx := ReservedSuffix("." + st.Name); sx != "" {
				c.d.errorf(st.Pos, "reserved-suffix", "rename the step; "+sx+" names the runtime's own queues",
					"saga step %q makes the queue %q, which ends in the reserved suffix %q", st.Name, s.Name+"."+st.Name, sx)
			}
			if prev, ok := seen[st.Name]; ok {
				c.d.errorf(st.Pos, "duplicate-step", "give each step of a saga its own name",
					"saga %q has two steps named %q (the first at %s)", s.Name, st.Name, prev.Pos)
			}
			seen[st.Name] = st
		}
	}
	for _, s := range c.f.Schedules {
		c.name(s.Pos, "schedule", s.Name)
	}
	for _, q := range c.f.Topology.Queues {
		c.name(q.Pos, "queue", q.Name)
	}
}

func (c *fileChecker) compileTypes(tc *typeCompiler) {
	for _, t := range c.f.Types {
		if t.Name == OutputNone {
			c.d.errorf(t.Pos, "invalid-name", "rename the type", "a type cannot be named %q: `output: none` means a handler that returns nothing", OutputNone)
		}
		if t.Avro != nil {
			c.compileAvro(tc, t)
			continue
		}
		s, err := tc.compile(t.Name, t.Schema, t.doc)
		t.doc = nil
		if err != nil {
			c.d.errorf(t.Pos, "invalid-type", typeHint(err), "type %q is not a valid JSON Schema: %s", t.Name, schemaCompileMessage(err))
			continue
		}
		if refLoops(s) {
			c.d.errorf(t.Pos, "invalid-type", "break the $ref cycle", "type %q is a loop of $refs that never reaches a schema", t.Name)
			continue
		}
		t.schema = s
	}
}

// refLoops reports whether a schema is only a chain of $refs that comes
// back to itself: validating against it would never end.
func refLoops(s validator) bool {
	seen := map[validator]bool{}
	for s != nil && s.Ref != nil {
		if seen[s] {
			return true
		}
		seen[s] = true
		s = s.Ref
	}
	return false
}

func typeHint(err error) string {
	var ro refOutside
	if errors.As(err, &ro) {
		return "keep $ref files inside the flow file's folder"
	}
	var uf unknownFormat
	if errors.As(err, &uf) {
		return "use one of the formats of JSON Schema 2020-12, such as date-time, date, email, uri or uuid"
	}
	// The compiler reports a $ref cycle it would follow for ever (a schema
	// that refers back to itself through allOf, properties and the like) as
	// an InfiniteLoopError inside its *SchemaError; a cycle of bare $refs
	// compiles and is caught by refLoops.
	var loop jsonschema.InfiniteLoopError
	if errors.As(err, &loop) {
		return "break the $ref cycle"
	}
	return "fix the schema (JSON Schema 2020-12)"
}

func schemaCompileMessage(err error) string {
	var se *jsonschema.SchemaError
	if errors.As(err, &se) {
		var ve *jsonschema.ValidationError
		if errors.As(se.Err, &ve) {
			leaf := deepestCause(ve)
			loc := leaf.InstanceLocation
			if loc == "" {
				loc = "/"
			}
			return fmt.Sprintf("at %s: %s", loc, leaf.Message)
		}
		err = se.Err
	}
	msg := err.Error()
	msg = strings.ReplaceAll(msg, "\n", " ")
	msg = strings.ReplaceAll(msg, fileScheme, "")
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return msg
}

// typeRef resolves a type name written at pos; "" means any payload.
func (c *fileChecker) typeRef(name string, pos Pos, allowNone bool) (*Type, bool) {
	if name == "" {
		return nil, true
	}
	if name == OutputNone {
		if !allowNone {
			c.d.errorf(pos, "unknown-type", "`none` is only an output", "type %q cannot be an input", name)
			return nil, false
		}
		return nil, true
	}
	t := c.f.types[name]
	if t == nil {
		hint := "declare it under types"
		if s := closest(name, slices.Sorted(maps.Keys(c.f.types))); s != "" {
			hint = fmt.Sprintf("declare it under types, or use %q", s)
		}
		c.d.errorf(pos, "unknown-type", hint, "type %q is not declared in this file", name)
		return nil, false
	}
	return t, true
}

func (c *fileChecker) handlerRef(h HandlerRef, pos Pos, what, key string) {
	if h.Plugin == "" {
		return // reported by the schema
	}
	if c.f.plugins[h.Plugin] != nil {
		return
	}
	hint := "declare it under plugins"
	if s := closest(h.Plugin, slices.Sorted(maps.Keys(c.f.plugins))); s != "" {
		hint = fmt.Sprintf("declare it under plugins, or use %q", s+"."+h.Handler)
	}
	c.d.errorf(pos, "unknown-handler", hint, "%s uses %s %q, but no plugin %q is declared in this file", what, key, h.String(), h.Plugin)
}

func (c *fileChecker) pipeline(p *Pipeline) {
	in, _ := c.typeRef(p.Input, p.InputPos, false)
	prevOut, prevName, prevKnown := p.Input, "", true
	_ = in
	for i, s := range p.Steps {
		c.handlerRef(s.Handler, s.HandlerPos, fmt.Sprintf("step %q", s.Name), "handler")
		if i > 0 && prevOut == OutputNone {
			c.d.errorf(s.Pos, "type-flow", fmt.Sprintf("remove `output: none` from %q, or end the pipeline there", prevName),
				"step %q follows step %q, whose output is none", s.Name, prevName)
		}
		if s.Input != "" {
			c.typeRef(s.Input, s.InputPos, false)
			// After an output left out (any JSON value, unchecked) a step
			// may declare what it takes: its input is checked on delivery,
			// as a first step's is when the pipeline's input is left out.
			expected := prevOut
			if i > 0 && expected != OutputNone && expected != "" && prevKnown && expected != s.Input {
				c.d.errorf(s.InputPos, "type-flow", fmt.Sprintf("make it %s, or change the output of %q", orAny(expected), prevName),
					"step %q takes input %s but step %q outputs %s", s.Name, s.Input, prevName, orAny(expected))
			}
			if i == 0 && p.Input != "" && s.Input != p.Input {
				c.d.errorf(s.InputPos, "type-flow", "make the two the same, or leave the step's input out",
					"step %q takes input %s but pipeline %q's input is %s", s.Name, s.Input, p.Name, p.Input)
			}
		} else if i == 0 {
			s.Input = p.Input
		} else if prevOut != OutputNone {
			s.Input = prevOut
		}
		if s.Output != "" {
			c.typeRef(s.Output, s.OutputPos, true)
		}
		if s.Delay > 0 && i == 0 {
			c.d.errorf(s.DelayPos, "delay-first-step", "remove the delay: a message reaches the first step when it is sent",
				"the first step %q cannot have a delay: nothing finished before it", s.Name)
		}
		if s.Delay > MaxDelay {
			c.d.errorf(s.DelayPos, "delay-too-long", fmt.Sprintf("use at most %s", MaxDelay),
				"step %q has a delay of %s, longer than the delay ladder holds (2^28 - 1 s, about 8.5 years)", s.Name, s.Delay)
		}
		prevOut, prevName, prevKnown = s.Output, s.Name, true
	}
}

// MaxDelay is the longest step delay: what the broker's delay ladder holds
// (FLOW-FORMAT §4: 28 levels of 1 s × 2^k, so 2^28 - 1 s, about 8.5 years).
const MaxDelay = (1<<28 - 1) * time.Second

func orAny(t string) string {
	if t == "" {
		return "any JSON value"
	}
	return t
}

func (c *fileChecker) condition(cond *Condition, input string) {
	if cond.Source == "" {
		return
	}
	var t *Type
	if input != "" {
		t = c.f.types[input]
		if !t.compiled() {
			t = nil // the type itself failed; reported there
		}
	}
	compiled, err := compileCondition(cond.Source, t)
	if err != nil {
		pos, msg := exprErrorPos(err, cond.Pos, cond.quoted, cond.inexact)
		hint := "fix the expression; `payload` is the message's JSON payload"
		if t != nil {
			hint = fmt.Sprintf("fix the expression; `payload` is of type %s with fields %s", t.Name, fieldList(t))
		}
		if m := noField.FindStringSubmatch(firstLine(msg)); m != nil {
			msg = fmt.Sprintf("there is no field %q", m[1])
			if t != nil {
				if s := closest(m[1], strings.Split(fieldList(t), ", ")); s != "" {
					hint = fmt.Sprintf("did you mean %q? `payload` is of type %s with fields %s", s, t.Name, fieldList(t))
				}
			}
		}
		c.d.errorf(pos, "invalid-when", hint, "when %q does not compile: %s", shorten(cond.Source), firstLine(msg))
		return
	}
	compiled.Pos = cond.Pos
	*cond = compiled
}

// shorten keeps messages readable when they quote a long expression.
func shorten(s string) string {
	if len(s) <= 120 {
		return s
	}
	return s[:100] + "…"
}

func fieldList(t *Type) string {
	if t.IsAvro() {
		return avroFieldList(t.Avro.Schema)
	}
	s := t.schema
	for s != nil && s.Ref != nil && len(s.Properties) == 0 {
		s = s.Ref
	}
	if s == nil || len(s.Properties) == 0 {
		return "(none declared)"
	}
	names := slices.Sorted(maps.Keys(s.Properties))
	return strings.Join(names, ", ")
}

func (c *fileChecker) itinerary(it *Itinerary) {
	c.typeRef(it.Input, it.InputPos, false)
	seen := map[string]*Stop{}
	for _, s := range it.Stops {
		if prev, ok := seen[s.Name]; ok {
			c.d.errorf(s.Pos, "duplicate-stop", "give each stop its own name",
				"itinerary %q has two stops named %q (the first at %s)", it.Name, s.Name, prev.Pos)
		}
		seen[s.Name] = s
		c.condition(&s.When, it.Input)
	}
}

func (c *fileChecker) consumer(cs *Consumer) {
	c.handlerRef(cs.Handler, cs.HandlerPos, fmt.Sprintf("consumer %q", cs.ID), "handler")
	c.typeRef(cs.Input, cs.InputPos, false)
	if cs.Output != "" {
		c.typeRef(cs.Output, cs.OutputPos, true)
	}
	if cs.Declare != nil {
		c.queueArgs(cs.Declare)
	}
}

// queueArgs checks queue arguments that acemq-flow sets itself and that the
// broker will refuse in the wrong type.
func (c *fileChecker) queueArgs(q *Queue) {
	for _, k := range slices.Sorted(maps.Keys(q.Arguments)) {
		v := q.Arguments[k]
		switch k {
		case "x-message-ttl", "x-delivery-limit", "x-max-length", "x-max-length-bytes", "x-expires", "x-max-priority":
			if _, ok := v.(int64); !ok {
				c.d.errorf(q.argAt(k), "argument-type", "write a whole number (the broker refuses strings here)",
					"queue %q argument %s is %v, not a whole number", q.Name, k, v)
			}
		case "x-queue-type":
			c.d.errorf(q.argAt(k), "argument-type", "set `type: quorum` or `type: classic` instead",
				"queue %q sets x-queue-type in arguments", q.Name)
		}
	}
}

func (c *fileChecker) saga(s *Saga) {
	c.typeRef(s.Input, s.InputPos, false)
	if s.Timeout > MaxDelay {
		c.d.errorf(s.TimeoutPos, "delay-too-long", fmt.Sprintf("use at most %s", MaxDelay),
			"saga %q times out after %s, longer than the delay ladder holds (2^28 - 1 s)", s.Name, s.Timeout)
	}
	for i, st := range s.Steps {
		c.handlerRef(st.Handler, st.HandlerPos, fmt.Sprintf("saga step %q", st.Name), "handler")
		if st.Compensate.Plugin != "" {
			c.handlerRef(st.Compensate, st.CompensatePos, fmt.Sprintf("saga step %q", st.Name), "compensate")
		}
		c.condition(&st.When, s.Input)
		c.typeRef(st.Output, st.OutputPos, true)
		if st.Compensate.Plugin == "" && i < len(s.Steps)-1 {
			c.d.warnf(st.Pos, "saga-uncompensated", "give it a compensate handler, or move it after the steps that can fail",
				"saga step %q cannot be undone but %d step(s) after it can fail, leaving it applied when they do", st.Name, len(s.Steps)-1-i)
		}
	}
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

func (c *fileChecker) schedule(s *Schedule) {
	if s.Cron != "" {
		if _, err := cronParser.Parse(s.Cron); err != nil {
			c.d.errorf(s.Pos, "invalid-cron", `write five fields "minute hour day-of-month month day-of-week", e.g. "0 2 * * *", or use every:`,
				"schedule %q has an invalid cron %q: %v", s.Name, s.Cron, err)
		}
	}
	if s.Every > 0 && s.Every < time.Second {
		c.d.errorf(s.Pos, "invalid-every", "use every: 1s or more", "schedule %q fires every %s, more often than once a second", s.Name, s.Every)
	}
	if s.Timezone == "Local" {
		c.d.errorf(s.Pos, "invalid-timezone", `use an IANA zone name such as "UTC" or "Europe/Paris"`,
			"schedule %q has timezone Local, which is whatever the machine running the runtime is set to", s.Name)
	} else if _, err := time.LoadLocation(s.Timezone); err != nil {
		c.d.errorf(s.Pos, "invalid-timezone", `use an IANA zone name such as "UTC" or "Europe/Paris"`,
			"schedule %q has an unknown timezone %q", s.Name, s.Timezone)
	}
}

// checkSet runs the rules that span every loaded file: unique consumer ids,
// pipeline, itinerary, saga and schedule names; one declaration per queue
// and exchange; one binary per plugin name; and schedule targets.
func checkSet(flows []*Flow, d *diags) {
	type seenAt struct {
		pos Pos
	}
	unique := func(kind string, seen map[string]seenAt, name string, pos Pos, hint string) {
		if name == "" {
			return
		}
		if prev, ok := seen[name]; ok {
			d.errorf(pos, "duplicate-"+kind, hint, "%s %q is declared twice: here and at %s", prevKind(kind), name, prev.pos)
			return
		}
		seen[name] = seenAt{pos: pos}
	}
	consumers, pipelines, itineraries, sagas, schedules := map[string]seenAt{}, map[string]seenAt{}, map[string]seenAt{}, map[string]seenAt{}, map[string]seenAt{}
	for _, f := range flows {
		for _, c := range f.Consumers {
			unique("consumer", consumers, c.ID, c.Pos, "consumer ids are unique across every flow a runtime loads; rename one")
		}
		for _, p := range f.Pipelines {
			unique("pipeline", pipelines, p.Name, p.Pos, "pipeline names are exchange names; rename one")
		}
		for _, it := range f.Itineraries {
			unique("itinerary", itineraries, it.Name, it.Pos, "rename one")
		}
		for _, s := range f.Sagas {
			unique("saga", sagas, s.Name, s.Pos, "saga names are queue prefixes; rename one")
		}
		for _, s := range f.Schedules {
			unique("schedule", schedules, s.Name, s.Pos, "rename one")
		}
	}

	// One declaration per queue: equal declarations agree, different ones
	// fail naming both (listeners.txt, "One queue, one declaration").
	queues := map[string]*Queue{}
	for _, f := range flows {
		decls := slices.Clone(f.Topology.Queues)
		for _, c := range f.Consumers {
			if c.Declare != nil {
				decls = append(decls, c.Declare)
			}
		}
		for _, q := range decls {
			prev, ok := queues[q.Name]
			if !ok {
				queues[q.Name] = q
				continue
			}
			if diff := queueDiff(prev, q); diff != "" {
				d.errorf(q.Pos, "queue-declared-differently", "declare it the same way in both places, or in one place only",
					"queue %q is declared differently here and at %s: %s", q.Name, prev.Pos, diff)
			}
		}
	}

	exchanges := map[string]*Exchange{}
	for _, f := range flows {
		for _, e := range f.Topology.Exchanges {
			if prev, ok := exchanges[e.Name]; ok && prev.Type != e.Type {
				d.errorf(e.Pos, "exchange-declared-differently", "declare it with one type",
					"exchange %q is declared as %s here and as %s at %s", e.Name, e.Type, prev.Type, prev.Pos)
				continue
			}
			exchanges[e.Name] = e
		}
	}
	for _, f := range flows {
		for _, p := range f.Pipelines {
			if e, ok := exchanges[p.Name]; ok && e.Type != "direct" {
				d.errorf(e.Pos, "exchange-declared-differently", "rename the exchange or the pipeline",
					"exchange %q is declared as %s, but pipeline %q at %s needs a direct exchange of that name", e.Name, e.Type, p.Name, p.Pos)
			}
		}
	}

	plugins := map[string]*Plugin{}
	for _, f := range flows {
		for _, p := range f.Plugins {
			prev, ok := plugins[p.Name]
			if !ok {
				plugins[p.Name] = p
				continue
			}
			if prev.Path != p.Path || !slices.Equal(prev.Args, p.Args) || !maps.Equal(prev.Env, p.Env) {
				// Plugins are scoped to their file (FLOW-FORMAT §1): both run,
				// one process each; only their names in logs and metrics meet.
				d.warnf(p.Pos, "plugin-declared-differently", "give the two plugins different names to tell them apart",
					"plugin %q is declared here with a different command, args or env than at %s; both run, and logs and metrics name them alike", p.Name, prev.Pos)
			}
		}
	}

	for _, f := range flows {
		for _, s := range f.Schedules {
			checkSendTarget(s, pipelines, itineraries, sagas, d)
		}
	}
	for _, f := range flows {
		for _, c := range f.Consumers {
			for _, b := range c.Bind {
				if _, ok := exchanges[b.Exchange]; !ok && b.Exchange != "" && !pipelineExchange(flows, b.Exchange) {
					d.warnf(b.Pos, "undeclared-exchange", "declare it under topology.exchanges, or make sure it exists on the broker",
						"consumer %q binds to exchange %q, which no loaded flow declares", c.ID, b.Exchange)
				}
			}
		}
	}
}

func pipelineExchange(flows []*Flow, name string) bool {
	for _, f := range flows {
		for _, p := range f.Pipelines {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

func prevKind(kind string) string {
	if kind == "consumer" {
		return "consumer id"
	}
	return kind
}

func checkSendTarget[T any](s *Schedule, pipelines, itineraries, sagas map[string]T, d *diags) {
	check := func(kind, name string, seen map[string]T) {
		if name == "" {
			return
		}
		if _, ok := seen[name]; !ok {
			names := slices.Sorted(maps.Keys(seen))
			hint := "declare it in one of the loaded flows"
			if c := closest(name, names); c != "" {
				hint = fmt.Sprintf("did you mean %q?", c)
			}
			d.errorf(s.Send.Pos, "unknown-send-target", hint, "schedule %q sends to %s %q, which no loaded flow declares", s.Name, kind, name)
		}
	}
	check("pipeline", s.Send.Pipeline, pipelines)
	check("itinerary", s.Send.Itinerary, itineraries)
	check("saga", s.Send.Saga, sagas)
}

// queueDiff describes how two declarations of one queue differ, or "".
func queueDiff(a, b *Queue) string {
	var parts []string
	if a.Type != b.Type {
		parts = append(parts, fmt.Sprintf("type %s here, %s there", b.Type, a.Type))
	}
	if a.DeadLetter != b.DeadLetter {
		parts = append(parts, fmt.Sprintf("dead_letter %v here, %v there", b.DeadLetter, a.DeadLetter))
	}
	if !reflect.DeepEqual(normArgs(a.Arguments), normArgs(b.Arguments)) {
		parts = append(parts, fmt.Sprintf("arguments %s here, %s there", argsText(b.Arguments), argsText(a.Arguments)))
	}
	return strings.Join(parts, "; ")
}

func normArgs(m map[string]any) map[string]any {
	if len(m) == 0 {
		return nil
	}
	return m
}

func argsText(m map[string]any) string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
