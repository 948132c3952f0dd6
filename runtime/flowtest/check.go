package flowtest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// check compares what happened so far with e. final: e is the case's own
// expect, where a case that names no dead letters expects none.
func (s *sim) check(e *Expect, final bool) []Failure {
	var out []Failure
	list := func(what string, exp *spec.Node, actual []any, defaults []string) {
		if exp != nil {
			out = append(out, compareList(what, exp, actual, defaults)...)
		}
	}
	route := make([]any, len(s.rec.route))
	for i, r := range s.rec.route {
		route[i] = r
	}
	list("route", e.Route, route, nil)
	for _, name := range e.outputKeys {
		var got []any
		for _, m := range s.rec.outputs[name] {
			got = append(got, payload(m.Body))
		}
		list("outputs of "+name, e.Outputs[name], got, nil)
	}
	list("replies", e.Replies, s.replies(), []string{"outcome", "payload"})
	list("retries", e.Retries, s.retries(), []string{"queue", "attempt", "delay"})
	dead := s.deadLetters()
	if e.DeadLetters != nil {
		list("dead letters", e.DeadLetters, dead, []string{"queue", "kind", "error"})
	} else if final && len(dead) > 0 {
		txt, _ := json.Marshal(dead)
		out = append(out, Failure{Pos: e.Pos, What: "dead letters", Expected: "none (the case names no dead_letters)", Actual: string(txt)})
	}
	list("sagas", e.Sagas, s.sagaItems(), []string{"saga", "state", "compensations"})
	list("firings", e.Firings, s.firings(), []string{"schedule", "tick"})
	list("delays", e.Delays, s.delays(), []string{"exchange", "routing_key", "in"})
	return out
}

func payload(body []byte) any {
	if len(body) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return string(body)
	}
	return v
}

func (s *sim) replies() []any {
	var out []any
	for _, m := range s.rec.replies {
		r := map[string]any{"outcome": decide.HeaderText(m.Headers[plan.HeaderOutcome]), "payload": payload(m.Body), "to": m.RoutingKey}
		if v, ok := m.Headers[plan.HeaderStoppedAt]; ok {
			r["stopped_at"] = decide.HeaderText(v)
		}
		if v, ok := m.Headers[plan.HeaderErrorKind]; ok {
			r["error_kind"] = decide.HeaderText(v)
			r["error"] = decide.HeaderText(m.Headers[plan.HeaderError])
		}
		out = append(out, r)
	}
	return out
}

func (s *sim) retries() []any {
	var out []any
	for _, r := range s.rec.retries {
		out = append(out, map[string]any{"queue": r.queue, "attempt": float64(r.attempt), "delay": durationText(r.delay)})
	}
	return out
}

func (s *sim) deadLetters() []any {
	var out []any
	for _, d := range s.rec.dead {
		attempt, _ := decide.HeaderInt(d.m.Headers[plan.HeaderAttempt])
		out = append(out, map[string]any{"queue": d.queue, "kind": decide.HeaderText(d.m.Headers[plan.HeaderErrorKind]),
			"error": decide.HeaderText(d.m.Headers[plan.HeaderError]), "payload": payload(d.m.Body), "attempt": float64(attempt)})
	}
	return out
}

func (s *sim) sagaItems() []any {
	var out []any
	for _, id := range s.order {
		inst := s.sagas[id]
		steps := map[string]any{}
		for _, st := range inst.Steps {
			steps[st.Name] = st.State
		}
		comps := []any{}
		for _, c := range s.comps[id] {
			comps = append(comps, c)
		}
		out = append(out, map[string]any{"saga": inst.Saga, "state": inst.State, "steps": steps, "compensations": comps})
	}
	return out
}

func (s *sim) firings() []any {
	var out []any
	for _, f := range s.rec.firings {
		out = append(out, map[string]any{"schedule": f.schedule, "tick": f.tick.UTC().Format(time.RFC3339)})
	}
	return out
}

func (s *sim) delays() []any {
	var out []any
	for _, d := range s.rec.delays {
		out = append(out, map[string]any{"exchange": d.exchange, "routing_key": d.routingKey, "in": durationText(d.in)})
	}
	return out
}

// compareList compares expected list exp with actual: the same length,
// and each expected item equal to the actual one in every key it names.
func compareList(what string, exp *spec.Node, actual []any, defaults []string) []Failure {
	keys := defaults
	for _, it := range exp.Items() {
		if it.IsMap() {
			for _, k := range it.Keys() {
				if s := fmt.Sprint(k.Value()); !slices.Contains(keys, s) {
					keys = append(keys, s)
				}
			}
		}
	}
	upd := project(actual, keys)
	if len(exp.Items()) != len(actual) {
		return []Failure{{Pos: exp.Pos(), What: what, Expected: fmt.Sprintf("%d (%s)", len(exp.Items()), text(exp.JSON())),
			Actual: fmt.Sprintf("%d (%s)", len(actual), text(project(actual, keys))), update: upd, at: exp}}
	}
	var out []Failure
	for i, it := range exp.Items() {
		got := actual[i]
		if !it.IsMap() {
			if !equal(it.JSON(), got) {
				out = append(out, Failure{Pos: it.Pos(), What: fmt.Sprintf("%s, item %d", what, i+1), Expected: text(it.JSON()), Actual: text(got), update: upd, at: exp})
			}
			continue
		}
		gm, _ := got.(map[string]any)
		for j, k := range it.Keys() {
			key := fmt.Sprint(k.Value())
			want, have := it.Vals()[j].JSON(), gm[key]
			if !equalKey(key, want, have) {
				out = append(out, Failure{Pos: it.Vals()[j].Pos(), What: fmt.Sprintf("%s, item %d, %s", what, i+1, key), Expected: text(want), Actual: text(have), update: upd, at: exp})
			}
		}
	}
	return out
}

func project(actual []any, keys []string) []any {
	out := make([]any, 0, len(actual))
	for _, a := range actual {
		m, ok := a.(map[string]any)
		if !ok || len(keys) == 0 {
			out = append(out, a)
			continue
		}
		p := map[string]any{}
		for _, k := range keys {
			if v, ok := m[k]; ok {
				p[k] = v
			}
		}
		out = append(out, p)
	}
	return out
}

func equalKey(key string, want, have any) bool {
	switch key {
	case "error":
		w, _ := want.(string)
		h, _ := have.(string)
		return strings.Contains(h, w)
	case "delay", "in":
		w, err1 := time.ParseDuration(fmt.Sprint(want))
		h, err2 := time.ParseDuration(fmt.Sprint(have))
		return err1 == nil && err2 == nil && w == h
	}
	return equal(want, have)
}

// equal compares two JSON values as JSON: numbers as numbers, whatever
// Go type holds them.
func equal(a, b any) bool {
	return reflect.DeepEqual(normal(a), normal(b))
}

func normal(v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	_ = json.Unmarshal(raw, &out)
	return out
}

func text(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(raw)
}
