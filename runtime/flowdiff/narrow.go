package flowdiff

import (
	"fmt"
	"reflect"
	"slices"
)

// problem is the first place a reader schema refuses what a writer schema
// accepted.
type problem struct {
	path, reason string
}

// narrowing proves, keyword by keyword, that every instance writer (the
// old type) accepts reader (the new type) accepts too, and returns the
// first place it cannot: the BACKWARD check of JSON Schema compatibility,
// conservative where it does not understand a keyword (one it does not
// compare by meaning must be the same on both sides). Both are decoded
// JSON with their $refs inlined.
func narrowing(reader, writer any, at string) *problem {
	if acceptsAll(reader) {
		return nil
	}
	if b, ok := writer.(bool); ok && !b {
		return nil
	}
	if b, ok := reader.(bool); ok && !b {
		return &problem{at, "the new type is false and accepts nothing"}
	}
	r, _ := reader.(map[string]any)
	w, ok := writer.(map[string]any)
	if !ok {
		w = map[string]any{} // true: the writer wrote anything
	}
	for _, k := range unionKeys(r, w) {
		if annotations[k] || compared[k] {
			continue
		}
		if !reflect.DeepEqual(r[k], w[k]) {
			return &problem{at, fmt.Sprintf("%s changes from %s to %s, and a change of %s is taken as narrowing", k, text(w[k]), text(r[k]), k)}
		}
	}
	if p := types(r, w, at); p != nil {
		return p
	}
	if p := values(r, w, at); p != nil {
		return p
	}
	if p := bounds(r, w, at); p != nil {
		return p
	}
	for _, k := range []string{"multipleOf", "pattern", "format"} {
		if rv, ok := r[k]; ok && !reflect.DeepEqual(rv, w[k]) {
			return &problem{at, fmt.Sprintf("%s %s is required where the old type had %s", k, text(rv), text(w[k]))}
		}
	}
	wreq, _ := w["required"].([]any)
	rreq, _ := r["required"].([]any)
	for _, q := range rreq {
		if !slices.ContainsFunc(wreq, func(x any) bool { return reflect.DeepEqual(x, q) }) {
			return &problem{at, fmt.Sprintf("property %s is required, and the old type let messages leave it out", text(q))}
		}
	}
	if p := properties(r, w, at); p != nil {
		return p
	}
	if ri, ok := r["items"]; ok {
		wi, ok := w["items"]
		if !ok {
			wi = true
		}
		if p := narrowing(ri, wi, at+"[]"); p != nil {
			return p
		}
	}
	return nil
}

var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$comment": true,
	"$schema": true, "$id": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// compared are the keywords narrowing compares by their meaning.
var compared = map[string]bool{
	"type": true, "enum": true, "const": true, "required": true, "properties": true, "additionalProperties": true, "items": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "minLength": true, "maxLength": true,
	"minItems": true, "maxItems": true, "minProperties": true, "maxProperties": true, "multipleOf": true, "pattern": true, "format": true,
}

func acceptsAll(s any) bool {
	switch s := s.(type) {
	case bool:
		return s
	case map[string]any:
		for k := range s {
			if !annotations[k] {
				return false
			}
		}
		return true
	}
	return false
}

func typeSet(s map[string]any) []string {
	switch t := s["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if x, ok := x.(string); ok {
				out = append(out, x)
			}
		}
		return out
	}
	return nil // every type
}

func types(r, w map[string]any, at string) *problem {
	rt := typeSet(r)
	if rt == nil {
		return nil
	}
	wt := typeSet(w)
	if wt == nil {
		return &problem{at, fmt.Sprintf("the type is restricted to %s, and the old type allowed any", text(r["type"]))}
	}
	for _, t := range wt {
		if !slices.Contains(rt, t) && !(t == "integer" && slices.Contains(rt, "number")) {
			return &problem{at, fmt.Sprintf("%s is no longer allowed (type %s, was %s)", t, text(r["type"]), text(w["type"]))}
		}
	}
	return nil
}

// values checks enum and const: the reader's values must hold every value
// the writer could write.
func values(r, w map[string]any, at string) *problem {
	allowed := func(s map[string]any) ([]any, bool) {
		if c, ok := s["const"]; ok {
			return []any{c}, true
		}
		e, ok := s["enum"].([]any)
		return e, ok
	}
	rv, rok := allowed(r)
	if !rok {
		return nil
	}
	wv, wok := allowed(w)
	if !wok {
		return &problem{at, fmt.Sprintf("only %s is allowed, and the old type allowed any value", text(rv))}
	}
	for _, v := range wv {
		if !slices.ContainsFunc(rv, func(x any) bool { return reflect.DeepEqual(x, v) }) {
			return &problem{at, fmt.Sprintf("%s is no longer allowed", text(v))}
		}
	}
	return nil
}

func bounds(r, w map[string]any, at string) *problem {
	for _, k := range []string{"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"} {
		rv, rok := r[k].(float64)
		if !rok {
			continue
		}
		if wv, wok := w[k].(float64); !wok || wv < rv {
			return &problem{at, fmt.Sprintf("%s %g is required where the old type had %s", k, rv, text(w[k]))}
		}
	}
	for _, k := range []string{"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"} {
		rv, rok := r[k].(float64)
		if !rok {
			continue
		}
		if wv, wok := w[k].(float64); !wok || wv > rv {
			return &problem{at, fmt.Sprintf("%s %g is required where the old type had %s", k, rv, text(w[k]))}
		}
	}
	return nil
}

func properties(r, w map[string]any, at string) *problem {
	rp, _ := r["properties"].(map[string]any)
	wp, _ := w["properties"].(map[string]any)
	wextra, ok := w["additionalProperties"]
	if !ok {
		wextra = true
	}
	rextra, ok := r["additionalProperties"]
	if !ok {
		rextra = true
	}
	for _, name := range unionKeys(rp, wp) {
		rs, inR := rp[name]
		ws, inW := wp[name]
		switch {
		case inR && inW:
			if p := narrowing(rs, ws, at+"."+name); p != nil {
				return p
			}
		case inR:
			// The writer may have put anything its additionalProperties
			// allowed under this name.
			if p := narrowing(rs, wextra, at+"."+name); p != nil {
				return p
			}
		default:
			if p := narrowing(rextra, ws, at+"."+name); p != nil {
				return p
			}
		}
	}
	if _, ok := r["additionalProperties"]; ok {
		if p := narrowing(rextra, wextra, at+".*"); p != nil {
			return p
		}
	}
	return nil
}

func unionKeys(a, b map[string]any) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func text(v any) string {
	switch v := v.(type) {
	case nil:
		return "none"
	case string:
		return fmt.Sprintf("%q", v)
	case []any:
		s := "["
		for i, x := range v {
			if i > 0 {
				s += ", "
			}
			s += text(x)
		}
		return s + "]"
	case map[string]any:
		return "a schema"
	}
	return fmt.Sprint(v)
}
