package flowtest

import (
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/spec"
)

// Expect is what a case expects. A field left out is not checked, but for
// DeadLetters: a case that names none expects none (exact: none means
// none). Every list is exact: the same items, in the same order.
type Expect struct {
	Pos         spec.Pos
	Route       *spec.Node            // [step, ...]: the steps whose handler returned, in order
	Outputs     map[string]*spec.Node // queue or exchange → [payload, ...]
	outputKeys  []string
	Replies     *spec.Node // [{outcome, payload, stopped_at, error_kind}]
	Retries     *spec.Node // [{queue, attempt, delay}]
	DeadLetters *spec.Node // [{queue, kind, error, payload}]
	Sagas       *spec.Node // [{saga, state, steps: {name: state}, compensations: [...]}]
	Firings     *spec.Node // [{schedule, tick}]
	Delays      *spec.Node // [{to, due}]
}

func (r *reader) expect(n *spec.Node) *Expect {
	e := &Expect{Pos: n.Pos(), Outputs: map[string]*spec.Node{}}
	if !n.IsMap() {
		r.errorf(n.Pos(), "write expect as a mapping: route, outputs, replies, retries, dead_letters, sagas, firings, delays", "expect is a mapping")
		return e
	}
	r.keys(n, "expect", "route", "outputs", "replies", "retries", "dead_letters", "sagas", "firings", "delays")
	seq := func(k string) *spec.Node {
		v := n.Get(k)
		if v == nil {
			return nil
		}
		if v.IsScalar() && v.Value() == nil {
			return v // null: an empty list
		}
		if !v.IsSeq() {
			r.errorf(v.Pos(), "write a list; [] expects none", "%s is a list", k)
			return nil
		}
		return v
	}
	e.Route, e.Replies, e.Retries = seq("route"), seq("replies"), seq("retries")
	e.DeadLetters, e.Sagas, e.Firings, e.Delays = seq("dead_letters"), seq("sagas"), seq("firings"), seq("delays")
	if o := n.Get("outputs"); o != nil {
		if !o.IsMap() {
			r.errorf(o.Pos(), "map a queue or exchange to the payloads it got, [] for none", "outputs is a mapping")
		}
		for i, k := range o.Keys() {
			v := o.Vals()[i]
			if !v.IsSeq() && (!v.IsScalar() || v.Value() != nil) { // null: an empty list
				r.errorf(v.Pos(), "write a list of payloads; [] expects none", "outputs of %v is a list", k.Value())
				continue
			}
			name := fmt.Sprint(k.Value())
			e.Outputs[name] = v
			e.outputKeys = append(e.outputKeys, name)
		}
	}
	for _, l := range []*spec.Node{e.Replies, e.Retries, e.DeadLetters, e.Sagas, e.Firings, e.Delays} {
		if l == nil {
			continue
		}
		for _, it := range l.Items() {
			if !it.IsMap() {
				r.errorf(it.Pos(), "write each item as a mapping", "a list item here is a mapping")
			}
		}
	}
	if e.Retries != nil {
		for _, it := range e.Retries.Items() {
			if d := it.Get("delay"); d != nil {
				r.duration(d, "delay")
			}
		}
	}
	return e
}

// A Failure is an expectation that did not hold: where it is written, what
// was expected and what happened.
type Failure struct {
	Pos      spec.Pos
	What     string
	Expected string
	Actual   string
	// update, when set, is the text that makes the expectation hold
	// (--update), replacing the node at.
	update any
	at     *spec.Node
}

func (f Failure) Message() string {
	if f.Expected == "" && f.Actual == "" {
		return f.What
	}
	return fmt.Sprintf("%s: expected %s, got %s", f.What, f.Expected, f.Actual)
}

// durationText is d as tests write it: 1s, 1m30s, 2h.
func durationText(d time.Duration) string {
	s := d.String()
	for _, suf := range []string{"m0s", "h0m"} {
		if len(s) > len(suf) && s[len(s)-len(suf):] == suf {
			s = s[:len(s)-len(suf)+1]
		}
	}
	return s
}

// Updatable reports whether --update can rewrite the expectation with
// what happened.
func (f Failure) Updatable() bool { return f.at != nil }
