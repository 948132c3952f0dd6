package schemacompat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// checkJSONSchema refuses a document that is not a JSON Schema: it must be
// an object or a boolean and compile (the draft its $schema names, 2020-12
// without one). A $ref to another document is refused rather than
// fetched: a registered schema stands alone.
func checkJSONSchema(v any, canonical string) error {
	switch v.(type) {
	case map[string]any, bool:
	default:
		return errors.New("a JSON Schema is an object or a boolean")
	}
	c := jsonschema.NewCompiler()
	c.LoadURL = func(u string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("the schema refers to %s: a registered JSON Schema must not refer to another document", u)
	}
	const url = "acemq-registry:///schema.json"
	if err := c.AddResource(url, strings.NewReader(canonical)); err != nil {
		return err
	}
	if _, err := c.Compile(url); err != nil {
		return err
	}
	return nil
}

// The JSON Schema rule set. compareJSON(reader, writer) proves that every
// instance writer accepts, reader accepts too, keyword by keyword, and
// refuses what it cannot prove (conservative: a change it does not
// understand is incompatible). With "reader" the new schema and "writer"
// the old one that is BACKWARD; the other way round FORWARD. It checks:
//
//   - true or {} as the reader accepts anything; false as the writer
//     accepts nothing; false as the reader accepts nothing else.
//   - type: every type the writer allows the reader allows (integer is
//     within number); a writer without type allows every type.
//   - enum and const: the reader's values include every value the writer
//     can hold; a reader without them is wider.
//   - required: no property the reader requires that the writer does not.
//   - properties: each property both have is compared recursively; one
//     the reader adds must accept whatever the writer's additionalProperties
//     let it write there (anything, when that is absent or true: adding a
//     constrained property to an open object is incompatible, as in
//     Confluent's rules); one the reader drops must be accepted by the
//     reader's additionalProperties.
//   - additionalProperties: the reader's accepts what the writer's does
//     (false is the narrowest, absent or true the widest).
//   - items (one schema for every item): compared recursively.
//   - minimum, exclusiveMinimum, minLength, minItems, minProperties must
//     not rise, their max counterparts must not fall, and none may appear
//     in the reader when the writer has none; multipleOf, pattern and
//     format must be the writer's or absent.
//   - annotations (title, description, default, examples, $comment,
//     $schema, $id, deprecated, readOnly, writeOnly) are not compared.
//   - any other keyword (allOf, anyOf, oneOf, not, $ref, $defs,
//     patternProperties, if/then/else, dependentRequired, prefixItems,
//     uniqueItems, …) must be the same in both, or the change is refused.
func compareJSON(reader, writer any) *Problem {
	return jsonAt(reader, writer, "$")
}

var jsonAnnotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$comment": true,
	"$schema": true, "$id": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// jsonChecked are the keywords compared by their meaning.
var jsonChecked = map[string]bool{
	"type": true, "enum": true, "const": true, "required": true, "properties": true,
	"additionalProperties": true, "items": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"minLength": true, "maxLength": true, "minItems": true, "maxItems": true,
	"minProperties": true, "maxProperties": true, "multipleOf": true, "pattern": true, "format": true,
}

func jsonAt(reader, writer any, path string) *Problem {
	if acceptsAll(reader) {
		return nil
	}
	if b, ok := writer.(bool); ok && !b {
		return nil
	}
	if b, ok := reader.(bool); ok && !b {
		return &Problem{Path: path, Reason: "the reader's schema is false and accepts nothing the writer wrote"}
	}
	r, ok := reader.(map[string]any)
	if !ok {
		// Not a schema object (the tuple form of items in older drafts):
		// only an unchanged value is known to be compatible.
		if reflect.DeepEqual(reader, writer) {
			return nil
		}
		return &Problem{Path: path, Reason: fmt.Sprintf("changed from %s to %s, a form these rules compare only when it is unchanged", jsonText(writer), jsonText(reader))}
	}
	w, ok := writer.(map[string]any)
	if !ok { // writer true: accepts anything, reader constrains
		w = map[string]any{}
	}
	if p := jsonOtherKeywords(r, w, path); p != nil {
		return p
	}
	if p := jsonTypes(r, w, path); p != nil {
		return p
	}
	if p := jsonValues(r, w, path); p != nil {
		return p
	}
	if p := jsonBounds(r, w, path); p != nil {
		return p
	}
	for _, k := range []string{"multipleOf", "pattern", "format"} {
		rv, rok := r[k]
		if rok && !reflect.DeepEqual(rv, w[k]) {
			return &Problem{Path: path, Reason: fmt.Sprintf("%s is %s, the writer's %s", k, jsonText(rv), orNone(w, k))}
		}
	}
	if p := jsonRequired(r, w, path); p != nil {
		return p
	}
	if p := jsonProperties(r, w, path); p != nil {
		return p
	}
	if ri, ok := r["items"]; ok {
		wi, wok := w["items"]
		if !wok {
			wi = true
		}
		if p := jsonAt(ri, wi, path+"[]"); p != nil {
			return p
		}
	}
	return nil
}

// acceptsAll reports whether s is true, or an object of annotations alone.
func acceptsAll(s any) bool {
	switch s := s.(type) {
	case bool:
		return s
	case map[string]any:
		for k := range s {
			if !jsonAnnotations[k] {
				return false
			}
		}
		return true
	}
	return false
}

func jsonOtherKeywords(r, w map[string]any, path string) *Problem {
	keys := map[string]bool{}
	for k := range r {
		keys[k] = true
	}
	for k := range w {
		keys[k] = true
	}
	for _, k := range sortedKeys(keys) {
		if jsonAnnotations[k] || jsonChecked[k] {
			continue
		}
		if !reflect.DeepEqual(r[k], w[k]) {
			return &Problem{Path: path, Reason: fmt.Sprintf("%s changed, from %s to %s; this registry's JSON Schema rules compare %s only when it is unchanged (set the subject's level to NONE to register it)",
				k, orNone(w, k), orNone(r, k), k)}
		}
	}
	return nil
}

func jsonTypeSet(s map[string]any) []string {
	switch t := s["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func jsonTypes(r, w map[string]any, path string) *Problem {
	rt := jsonTypeSet(r)
	if rt == nil {
		return nil
	}
	wt := jsonTypeSet(w)
	if wt == nil {
		return &Problem{Path: path, Reason: fmt.Sprintf("the type is now %s, and the writer allowed any type", jsonText(r["type"]))}
	}
	for _, t := range wt {
		if slices.Contains(rt, t) || (t == "integer" && slices.Contains(rt, "number")) {
			continue
		}
		return &Problem{Path: path, Reason: fmt.Sprintf("the writer may write %s, which the type %s does not allow", t, jsonText(r["type"]))}
	}
	return nil
}

// jsonValues checks enum and const: the reader's values must hold every
// value the writer can.
func jsonValues(r, w map[string]any, path string) *Problem {
	allowed := func(s map[string]any) ([]any, bool) {
		if c, ok := s["const"]; ok {
			return []any{c}, true
		}
		if e, ok := s["enum"].([]any); ok {
			return e, true
		}
		return nil, false
	}
	rv, rok := allowed(r)
	if !rok {
		return nil
	}
	wv, wok := allowed(w)
	if !wok {
		return &Problem{Path: path, Reason: fmt.Sprintf("the values are now limited to %s, and the writer's were not", jsonText(rv))}
	}
	for _, v := range wv {
		if !slices.ContainsFunc(rv, func(x any) bool { return reflect.DeepEqual(x, v) }) {
			return &Problem{Path: path, Reason: fmt.Sprintf("the writer's value %s was removed", jsonText(v))}
		}
	}
	return nil
}

// jsonBounds: a lower bound must not rise, an upper bound must not fall.
func jsonBounds(r, w map[string]any, path string) *Problem {
	for _, b := range []struct {
		key   string
		lower bool
	}{
		{"minimum", true}, {"exclusiveMinimum", true}, {"minLength", true}, {"minItems", true}, {"minProperties", true},
		{"maximum", false}, {"exclusiveMaximum", false}, {"maxLength", false}, {"maxItems", false}, {"maxProperties", false},
	} {
		rv, rok := number(r[b.key])
		if !rok {
			continue
		}
		wv, wok := number(w[b.key])
		switch {
		case !wok:
			return &Problem{Path: path, Reason: fmt.Sprintf("%s %s is new: the writer had none", b.key, rv.String())}
		case b.lower && rv.Cmp(wv) > 0:
			return &Problem{Path: path, Reason: fmt.Sprintf("%s rose from %s to %s", b.key, wv.String(), rv.String())}
		case !b.lower && rv.Cmp(wv) < 0:
			return &Problem{Path: path, Reason: fmt.Sprintf("%s fell from %s to %s", b.key, wv.String(), rv.String())}
		}
	}
	return nil
}

func number(v any) (*big.Float, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	f, _, err := big.ParseFloat(n.String(), 10, 256, big.ToNearestEven)
	return f, err == nil
}

func jsonRequired(r, w map[string]any, path string) *Problem {
	rr, _ := r["required"].([]any)
	wr, _ := w["required"].([]any)
	for _, name := range rr {
		if !slices.Contains(wr, name) {
			return &Problem{Path: fieldPath(path, fmt.Sprint(name)), Reason: "the property is now required, and the writer did not require it"}
		}
	}
	return nil
}

func jsonProperties(r, w map[string]any, path string) *Problem {
	rp, _ := r["properties"].(map[string]any)
	wp, _ := w["properties"].(map[string]any)
	wAdd, wHas := w["additionalProperties"]
	if !wHas {
		wAdd = true
	}
	rAdd, rHas := r["additionalProperties"]
	if !rHas {
		rAdd = true
	}
	for _, name := range sortedKeys(rp) {
		at := fieldPath(path, name)
		if ws, ok := wp[name]; ok {
			if p := jsonAt(rp[name], ws, at); p != nil {
				return p
			}
			continue
		}
		// The writer could write this property through its
		// additionalProperties.
		if p := jsonAt(rp[name], wAdd, at); p != nil {
			p.Reason = "the property is new, and the writer could write it with any value its additionalProperties allowed: " + p.Reason
			return p
		}
	}
	for _, name := range sortedKeys(wp) {
		if _, ok := rp[name]; ok {
			continue
		}
		if p := jsonAt(rAdd, wp[name], fieldPath(path, name)); p != nil {
			p.Reason = "the property was removed, and the reader's additionalProperties does not take what the writer wrote there: " + p.Reason
			return p
		}
	}
	if p := jsonAt(rAdd, wAdd, path+".*"); p != nil {
		p.Reason = "additionalProperties narrowed: " + p.Reason
		return p
	}
	return nil
}

func fieldPath(path, name string) string { return path + "." + name }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func orNone(m map[string]any, k string) string {
	v, ok := m[k]
	if !ok {
		return "none"
	}
	return jsonText(v)
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
