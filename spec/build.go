package spec

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// builder turns a schema-checked node tree into a Flow, filling defaults.
// The schema has already checked shapes, so the builder only reads; it
// still never assumes a value is there.
type builder struct {
	file string // the file's display name, for positions
	dir  string // the file's folder in the file system
	root string // OS path of the file system's root, for plugin commands
	d    *diags
}

func (b *builder) flow(n *node) *Flow {
	f := &Flow{Pos: n.pos, File: b.file, Dir: path.Dir(b.file), plugins: map[string]*Plugin{}, types: map[string]*Type{}}
	f.Version, _ = b.str(n, "version")
	f.Name, _ = b.str(n, "name")
	f.Defaults = b.defaults(n.get("defaults"), n.pos)
	if ps := n.get("plugins"); ps != nil && ps.kind == kMap {
		for i, k := range ps.keys {
			p := b.plugin(k.value.(string), ps.vals[i], k.pos, b.dir)
			f.Plugins = append(f.Plugins, p)
			f.plugins[p.Name] = p
		}
		sort.Slice(f.Plugins, func(i, j int) bool { return f.Plugins[i].Name < f.Plugins[j].Name })
	}
	if ts := n.get("types"); ts != nil && ts.kind == kMap {
		for i, k := range ts.keys {
			v := ts.vals[i]
			t := &Type{Pos: k.pos, Name: k.value.(string)}
			if v.get("avro") != nil {
				b.avroType(f.Name, t, v)
				f.Types = append(f.Types, t)
				f.types[t.Name] = t
				continue
			}
			t.Ref, _ = b.str(v, "$ref")
			doc := v.toJSON()
			doc = b.subjectWithoutAvro(t.Name, v, doc)
			t.ClaimCheck, doc = b.typeClaimCheck(t.Name, v, doc)
			raw, err := json.Marshal(doc)
			t.Schema = raw
			if err == nil {
				// Kept for the $ref check, which then need not decode
				// Schema again. A document JSON cannot hold (NaN) stays
				// nil, as Schema then does not parse: nothing to check.
				t.doc = doc
			}
			f.Types = append(f.Types, t)
			f.types[t.Name] = t
		}
		sort.Slice(f.Types, func(i, j int) bool { return f.Types[i].Name < f.Types[j].Name })
	}
	for _, pn := range b.items(n, "pipelines") {
		f.Pipelines = append(f.Pipelines, b.pipeline(pn, f.Defaults))
	}
	for _, in := range b.items(n, "itineraries") {
		f.Itineraries = append(f.Itineraries, b.itinerary(in))
	}
	for _, cn := range b.items(n, "consumers") {
		f.Consumers = append(f.Consumers, b.consumer(cn, f.Defaults))
	}
	for _, sn := range b.items(n, "sagas") {
		f.Sagas = append(f.Sagas, b.saga(sn, f.Defaults))
	}
	for _, sn := range b.items(n, "schedules") {
		f.Schedules = append(f.Schedules, b.schedule(sn))
	}
	f.Topology = b.topology(n.get("topology"), n.pos, f.Defaults)
	return f
}

func (b *builder) items(n *node, key string) []*node {
	v := n.get(key)
	if v == nil || v.kind != kSeq {
		return nil
	}
	var out []*node
	for _, it := range v.items {
		if it.kind == kMap {
			out = append(out, it)
		}
	}
	return out
}

func (b *builder) str(n *node, key string) (string, Pos) {
	return strValue(n, n.get(key))
}

// strValue is the text of v, the value under some key of n, and its
// position; "" and n's position when there is none.
func strValue(n, v *node) (string, Pos) {
	if v == nil {
		return "", n.pos
	}
	s, ok := v.str()
	if !ok && v.kind == kScalar && v.value != nil {
		s = fmt.Sprint(v.value)
	}
	return s, v.pos
}

func (b *builder) int(n *node, key string) (int, bool) {
	v := n.get(key)
	if v == nil || v.kind != kScalar {
		return 0, false
	}
	switch x := v.value.(type) {
	case int64:
		return int(x), true
	case float64:
		return int(x), true
	}
	return 0, false
}

func (b *builder) bool(n *node, key string) (val, set bool) {
	v := n.get(key)
	if v == nil || v.kind != kScalar {
		return false, false
	}
	x, ok := v.value.(bool)
	return x, ok
}

// intOr is the key's whole number, or def when the key is not there.
func (b *builder) intOr(n *node, key string, def int) int {
	if v, ok := b.int(n, key); ok {
		return v
	}
	return def
}

// boolOr is the key's boolean, or def when the key is not there.
func (b *builder) boolOr(n *node, key string, def bool) bool {
	if v, ok := b.bool(n, key); ok {
		return v
	}
	return def
}

func (b *builder) float(n *node, key string) (float64, bool) {
	v := n.get(key)
	if v == nil || v.kind != kScalar {
		return 0, false
	}
	switch x := v.value.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func (b *builder) duration(n *node, key string) (time.Duration, Pos, bool) {
	s, pos := b.str(n, key)
	if s == "" {
		return 0, pos, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		b.d.errorf(pos, "bad-duration", `write a duration such as "500ms", "2s", "15m" or "1h"`,
			"%s %q is not a duration", key, s)
		return 0, pos, false
	}
	if d < 0 {
		b.d.errorf(pos, "bad-duration", "use a positive duration", "%s %q is negative", key, s)
		return 0, pos, false
	}
	return d, pos, true
}

func (b *builder) defaults(n *node, at Pos) Defaults {
	d := Defaults{Pos: at, QueueType: DefaultQueueType, Prefetch: DefaultPrefetch, Concurrency: DefaultConcurrency, Retry: DefaultRetry,
		ClaimCheck: ClaimCheck{Pos: at, Above: DefaultClaimCheckAbove}}
	if n == nil || n.kind != kMap {
		return d
	}
	d.Pos = n.pos
	if s, _ := b.str(n, "queue_type"); s != "" {
		d.QueueType = s
	}
	d.Prefetch = b.intOr(n, "prefetch", d.Prefetch)
	d.Concurrency = b.intOr(n, "concurrency", d.Concurrency)
	d.Idempotent, _ = b.bool(n, "idempotent")
	d.Retry = b.retry(n.get("retry"), DefaultRetry, d.Pos)
	d.ClaimCheck = b.claimCheck(n.get("claim_check"), d.ClaimCheck, "defaults.claim_check.above")
	return d
}

// retry reads a retry policy; fields left out come from base (the file's
// defaults.retry, itself filled from the built-in policy).
func (b *builder) retry(n *node, base Retry, at Pos) Retry {
	r := base
	r.Pos = at
	if n == nil || n.kind != kMap {
		return r
	}
	r.Pos = n.pos
	if v, ok := b.int(n, "max_attempts"); ok {
		r.MaxAttempts = v
	}
	// A delay taken from base is reported at this retry mapping.
	initialAt, maxAt := n.pos, n.pos
	if v, at, ok := b.duration(n, "initial_delay"); ok {
		r.InitialDelay, initialAt = v, at
	}
	if v, at, ok := b.duration(n, "max_delay"); ok {
		r.MaxDelay, maxAt = v, at
	}
	if v, ok := b.float(n, "jitter"); ok {
		r.Jitter = v
	}
	if r.InitialDelay > r.MaxDelay {
		b.d.errorf(n.pos, "retry-delays", "make initial_delay at most max_delay",
			"retry initial_delay %s is longer than max_delay %s", r.InitialDelay, r.MaxDelay)
	}
	if r.InitialDelay < time.Millisecond {
		b.d.errorf(n.pos, "retry-delays", "use at least 1ms", "retry initial_delay %s is shorter than a millisecond", r.InitialDelay)
	}
	// Rung queues are named and timed in whole milliseconds (x-message-ttl).
	for _, d := range []struct {
		key string
		v   time.Duration
		at  Pos
	}{{"initial_delay", r.InitialDelay, initialAt}, {"max_delay", r.MaxDelay, maxAt}} {
		if d.v >= time.Millisecond && d.v%time.Millisecond != 0 {
			b.d.errorf(d.at, "retry-delays", fmt.Sprintf("write it in whole milliseconds, such as %s", d.v.Round(time.Millisecond)),
				"retry %s %s is not a whole number of milliseconds", d.key, d.v)
		}
	}
	return r
}

func (b *builder) plugin(name string, n *node, at Pos, dir string) *Plugin {
	p := &Plugin{Pos: at, Name: name, Timeout: DefaultTimeout, Dir: filepath.Join(b.root, filepath.FromSlash(dir))}
	p.Command, _ = b.str(n, "command")
	if p.Command != "" {
		if filepath.IsAbs(p.Command) {
			p.Path = filepath.Clean(p.Command)
		} else {
			p.Path = filepath.Join(b.root, filepath.FromSlash(path.Join(dir, p.Command)))
		}
	}
	if a := n.get("args"); a != nil && a.kind == kSeq {
		for _, it := range a.items {
			if it.kind == kScalar && it.value != nil {
				p.Args = append(p.Args, fmt.Sprint(it.value))
			}
		}
	}
	if e := n.get("env"); e != nil && e.kind == kMap {
		p.Env = map[string]string{}
		for i, k := range e.keys {
			if v := e.vals[i]; v.kind == kScalar && v.value != nil {
				p.Env[k.value.(string)] = fmt.Sprint(v.value)
			} else {
				p.Env[k.value.(string)] = ""
			}
		}
	}
	p.SHA256, _ = b.str(n, "sha256")
	p.SHA256 = strings.ToLower(p.SHA256)
	if v, pos, ok := b.duration(n, "timeout"); ok {
		if v == 0 {
			b.d.errorf(pos, "bad-duration", "give a positive timeout such as 30s, or leave timeout out for the default of "+DefaultTimeout.String(),
				"plugin %q has a timeout of 0: every call needs a limit", name)
		} else {
			p.Timeout = v
		}
	}
	return p
}

func (b *builder) handler(n *node, key string) (HandlerRef, Pos) {
	s, pos := b.str(n, key)
	if s == "" {
		return HandlerRef{}, pos
	}
	plugin, handler, _ := strings.Cut(s, ".")
	return HandlerRef{Plugin: plugin, Handler: handler}, pos
}

func (b *builder) pipeline(n *node, def Defaults) *Pipeline {
	p := &Pipeline{Pos: n.pos}
	p.Name, _ = b.str(n, "name")
	p.Description, _ = b.str(n, "description")
	p.Input, p.InputPos = b.str(n, "input")
	for _, sn := range b.items(n, "steps") {
		s := &Step{Pos: sn.pos, AutoStartup: true}
		s.Name, _ = b.str(sn, "name")
		s.Description, _ = b.str(sn, "description")
		s.Handler, s.HandlerPos = b.handler(sn, "handler")
		s.Input, s.InputPos = b.str(sn, "input")
		s.Output, s.OutputPos = b.str(sn, "output")
		s.Retry = b.retry(sn.get("retry"), def.Retry, def.Retry.Pos)
		s.Prefetch = b.intOr(sn, "prefetch", def.Prefetch)
		s.Concurrency = b.intOr(sn, "concurrency", def.Concurrency)
		s.Idempotent = b.boolOr(sn, "idempotent", def.Idempotent)
		s.AutoStartup = b.boolOr(sn, "auto_startup", true)
		s.QueueType = def.QueueType
		if v, _ := b.str(sn, "queue_type"); v != "" {
			s.QueueType = v
		}
		if v, pos, ok := b.duration(sn, "delay"); ok {
			s.Delay, s.DelayPos = v, pos
		}
		p.Steps = append(p.Steps, s)
	}
	return p
}

func (b *builder) itinerary(n *node) *Itinerary {
	it := &Itinerary{Pos: n.pos}
	it.Name, _ = b.str(n, "name")
	it.Description, _ = b.str(n, "description")
	it.Input, it.InputPos = b.str(n, "input")
	for _, sn := range b.items(n, "stops") {
		s := &Stop{Pos: sn.pos}
		s.Name, _ = b.str(sn, "name")
		s.Exchange, _ = b.str(sn, "exchange")
		s.RoutingKey, _ = b.str(sn, "routing_key")
		s.When = b.when(sn)
		it.Stops = append(it.Stops, s)
	}
	return it
}

func (b *builder) when(n *node) Condition {
	v := n.get("when")
	src, pos := strValue(n, v)
	return Condition{Source: src, Pos: pos, quoted: v != nil && v.quoted, inexact: v != nil && v.inexact}
}

func (b *builder) consumer(n *node, def Defaults) *Consumer {
	c := &Consumer{Pos: n.pos, AutoStartup: true}
	c.ID, _ = b.str(n, "id")
	c.Description, _ = b.str(n, "description")
	c.Queue, c.QueuePos = b.str(n, "queue")
	c.Handler, c.HandlerPos = b.handler(n, "handler")
	c.Input, c.InputPos = b.str(n, "input")
	c.Output, c.OutputPos = b.str(n, "output")
	for _, bn := range b.items(n, "bind") {
		bd := &Binding{Pos: bn.pos}
		bd.Exchange, _ = b.str(bn, "exchange")
		bd.RoutingKey, _ = b.str(bn, "routing_key")
		c.Bind = append(c.Bind, bd)
	}
	if dn := n.get("declare"); dn != nil && dn.kind == kMap {
		c.Declare = b.queue(dn, def)
		c.Declare.Name = c.Queue
	}
	c.Prefetch = b.intOr(n, "prefetch", def.Prefetch)
	c.Concurrency = b.intOr(n, "concurrency", def.Concurrency)
	c.AutoStartup = b.boolOr(n, "auto_startup", true)
	c.Idempotent = b.boolOr(n, "idempotent", def.Idempotent)
	c.Retry = b.retry(n.get("retry"), def.Retry, def.Retry.Pos)
	return c
}

func (b *builder) queue(n *node, def Defaults) *Queue {
	q := &Queue{Pos: n.pos, Type: def.QueueType}
	q.Name, _ = b.str(n, "name")
	if v, _ := b.str(n, "type"); v != "" {
		q.Type = v
	}
	q.DeadLetter, _ = b.bool(n, "dead_letter")
	if a := n.get("arguments"); a != nil && a.kind == kMap {
		q.Arguments = map[string]any{}
		q.argPos = map[string]Pos{}
		for i, k := range a.keys {
			v := a.vals[i]
			if v.kind == kScalar {
				q.Arguments[k.value.(string)] = v.value
				q.argPos[k.value.(string)] = v.pos
			}
		}
	}
	return q
}

func (b *builder) saga(n *node, def Defaults) *Saga {
	s := &Saga{Pos: n.pos}
	s.Name, _ = b.str(n, "name")
	s.Description, _ = b.str(n, "description")
	s.Input, s.InputPos = b.str(n, "input")
	if v, pos, ok := b.duration(n, "timeout"); ok && v == 0 {
		b.d.errorf(pos, "invalid-timeout", "use a positive duration such as 1h, or leave timeout out for none",
			"saga %q times out after 0s", s.Name)
	} else if ok {
		s.Timeout, s.TimeoutPos = v, pos
	}
	for _, sn := range b.items(n, "steps") {
		st := &SagaStep{Pos: sn.pos}
		st.Name, _ = b.str(sn, "name")
		st.Description, _ = b.str(sn, "description")
		st.Handler, st.HandlerPos = b.handler(sn, "handler")
		st.Compensate, st.CompensatePos = b.handler(sn, "compensate")
		st.When = b.when(sn)
		st.Output, st.OutputPos = b.str(sn, "output")
		st.Retry = b.retry(sn.get("retry"), def.Retry, def.Retry.Pos)
		s.Steps = append(s.Steps, st)
	}
	return s
}

func (b *builder) schedule(n *node) *Schedule {
	s := &Schedule{Pos: n.pos, Timezone: "UTC", Missed: MissedLatest, MissedPos: n.pos, MissedWindow: DefaultMissedWindow}
	s.Name, _ = b.str(n, "name")
	if v, pos := b.str(n, "missed"); v != "" {
		s.Missed, s.MissedPos = v, pos
	}
	if v, pos, ok := b.duration(n, "missed_window"); ok && v == 0 {
		b.d.errorf(pos, "invalid-missed-window", "use a positive duration such as 1h, or missed: skip to fire no missed tick",
			"schedule %q looks back 0s for missed ticks", s.Name)
	} else if ok {
		s.MissedWindow = v
	}
	s.Cron, _ = b.str(n, "cron")
	if v, pos, ok := b.duration(n, "every"); ok && v == 0 {
		b.d.errorf(pos, "invalid-every", "use every: 1s or more", "schedule %q fires every 0s", s.Name)
	} else if ok {
		s.Every = v
	}
	if tz, _ := b.str(n, "timezone"); tz != "" {
		s.Timezone = tz
	}
	if sn := n.get("send"); sn != nil && sn.kind == kMap {
		s.Send.Pos = sn.pos
		s.Send.Exchange, _ = b.str(sn, "exchange")
		s.Send.RoutingKey, _ = b.str(sn, "routing_key")
		s.Send.Pipeline, _ = b.str(sn, "pipeline")
		s.Send.Itinerary, _ = b.str(sn, "itinerary")
		s.Send.Saga, _ = b.str(sn, "saga")
		if pn := sn.get("payload"); pn != nil {
			s.Send.Payload, _ = json.Marshal(pn.toJSON())
		}
	}
	return s
}

func (b *builder) topology(n *node, at Pos, def Defaults) Topology {
	t := Topology{Pos: at, Apply: ApplyCreateOnly, MissingQueue: MissingFail}
	if n == nil || n.kind != kMap {
		return t
	}
	t.Pos = n.pos
	if v, _ := b.str(n, "apply"); v != "" {
		t.Apply = v
	}
	if v, _ := b.str(n, "missing_queue"); v != "" {
		t.MissingQueue = v
	}
	for _, en := range b.items(n, "exchanges") {
		e := &Exchange{Pos: en.pos}
		e.Name, _ = b.str(en, "name")
		e.Type, _ = b.str(en, "type")
		t.Exchanges = append(t.Exchanges, e)
	}
	for _, qn := range b.items(n, "queues") {
		t.Queues = append(t.Queues, b.queue(qn, def))
	}
	return t
}
