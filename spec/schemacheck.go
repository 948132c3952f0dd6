package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/acemq/acemq-flow/schemas"
)

var flowSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	if err := c.AddResource(schemas.FlowSchemaURL, bytes.NewReader(schemas.FlowSchema)); err != nil {
		return nil, err
	}
	return c.Compile(schemas.FlowSchemaURL)
})

// flowSchemaDoc is the schema as plain JSON, walked to list the keys
// accepted at a location for "did you mean" hints.
var flowSchemaDoc = sync.OnceValue(func() any {
	var v any
	_ = json.Unmarshal(schemas.FlowSchema, &v)
	return v
})

// checkSchema validates a parsed file against schemas/flow.schema.json and
// reports each failure at the position of the node it is about.
func checkSchema(root *node, d *diags) {
	s, err := flowSchema()
	if err != nil {
		d.errorf(root.pos, "internal", "", "the embedded flow schema does not compile: %v", err)
		return
	}
	err = s.Validate(root.toJSON())
	if err == nil {
		return
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		d.errorf(root.pos, "schema", "", "%v", err)
		return
	}
	seen := map[string]bool{}
	for _, leaf := range leaves(ve, nil) {
		diag := schemaDiagnostic(root, leaf)
		k := diag.Pos.String() + diag.Msg
		if !seen[k] {
			seen[k] = true
			d.list = append(d.list, diag)
		}
	}
}

// leaves collects the failures worth reporting. Under oneOf/anyOf only the
// alternative that got furthest into the value is followed: the one the
// author most likely meant.
func leaves(ve *jsonschema.ValidationError, out []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return append(out, ve)
	}
	kw := ve.KeywordLocation[strings.LastIndexByte(ve.KeywordLocation, '/')+1:]
	if kw == "oneOf" || kw == "anyOf" {
		best, bestDepth := ve.Causes[0], -1
		for _, c := range ve.Causes {
			if depth := maxDepthOf(c); depth > bestDepth {
				best, bestDepth = c, depth
			}
		}
		// Every alternative failed at the value itself: the value matches
		// none of the shapes, which is one problem, not several.
		if bestDepth <= strings.Count(ve.InstanceLocation, "/") {
			return append(out, &jsonschema.ValidationError{
				KeywordLocation: ve.KeywordLocation, InstanceLocation: ve.InstanceLocation,
				Message: "oneOf: " + alternativesMessage(ve),
			})
		}
		return leaves(best, out)
	}
	for _, c := range ve.Causes {
		out = leaves(c, out)
	}
	return out
}

func alternativesMessage(ve *jsonschema.ValidationError) string {
	var msgs []string
	for _, c := range ve.Causes {
		for _, l := range leaves(c, nil) {
			msgs = append(msgs, l.Message)
		}
	}
	return strings.Join(msgs, "; or ")
}

func maxDepthOf(ve *jsonschema.ValidationError) int {
	d := strings.Count(ve.InstanceLocation, "/")
	if len(ve.Causes) == 0 && strings.HasSuffix(ve.KeywordLocation, "/additionalProperties") {
		d++ // an unknown key is a near miss: the shape matched otherwise
	}
	for _, c := range ve.Causes {
		d = max(d, maxDepthOf(c))
	}
	return d
}

var quoted = regexp.MustCompile(`'([^']*)'`)

// schemaDiagnostic turns one schema failure into a sentence at a position.
func schemaDiagnostic(root *node, ve *jsonschema.ValidationError) Diagnostic {
	segs := pointer(ve.InstanceLocation)
	n, at := root, root
	for _, s := range segs {
		next := child(at, s)
		if next == nil {
			break
		}
		at = next
	}
	n = at
	where := describe(segs)
	kw := ve.KeywordLocation[strings.LastIndexByte(ve.KeywordLocation, '/')+1:]
	diag := Diagnostic{Pos: n.pos, Severity: Error, Code: "schema-" + kw}
	switch kw {
	case "additionalProperties":
		keys := quoted.FindAllStringSubmatch(ve.Message, -1)
		accepted := acceptedKeys(ve.KeywordLocation)
		key := ""
		if len(keys) > 0 {
			key = keys[0][1]
		}
		diag.Code = "unknown-key"
		if n.kind == kMap {
			diag.Pos = n.keyPos(key)
		}
		diag.Msg = fmt.Sprintf("unknown key %q in %s", key, where)
		if s := closest(key, accepted); s != "" {
			diag.Msg += fmt.Sprintf("; did you mean %q?", s)
		} else if len(accepted) > 0 {
			diag.Hint = "accepted keys are " + strings.Join(accepted, ", ")
		}
	case "required":
		missing := quoted.FindAllStringSubmatch(ve.Message, -1)
		var names []string
		for _, m := range missing {
			names = append(names, m[1])
		}
		diag.Code = "missing-key"
		if len(names) == 1 {
			diag.Msg = fmt.Sprintf("%s is missing the required key %q", where, names[0])
			diag.Hint = "add " + names[0] + ":"
		} else {
			diag.Msg = fmt.Sprintf("%s is missing the required keys %s", where, strings.Join(quoteAll(names), ", "))
			diag.Hint = "add them"
		}
	case "type":
		diag.Code = "wrong-type"
		diag.Msg = fmt.Sprintf("%s has the wrong type: %s", where, ve.Message)
		diag.Hint = "write it as " + expectedOf(ve.Message)
	case "enum", "const":
		diag.Code = "invalid-value"
		diag.Msg = fmt.Sprintf("%s is %s, which is not allowed: %s", where, scalarText(n), ve.Message)
	case "pattern":
		diag.Code = "invalid-value"
		diag.Hint = patternHint(ve.AbsoluteKeywordLocation + " " + ve.KeywordLocation)
		if diag.Hint != "" {
			diag.Msg = fmt.Sprintf("%s is %s, which is not valid here", where, scalarText(n))
		} else {
			diag.Msg = fmt.Sprintf("%s is %s, which %s", where, scalarText(n), ve.Message)
		}
	case "format":
		diag.Code = "invalid-value"
		diag.Msg = fmt.Sprintf("%s is %s, which %s", where, scalarText(n), ve.Message)
	case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
		// "must be <= 1000 but found 100000000": the bound is the remedy.
		diag.Code = "out-of-range"
		diag.Msg = fmt.Sprintf("%s is %s, out of range", where, scalarText(n))
		if m := bound.FindStringSubmatch(ve.Message); m != nil {
			diag.Hint = fmt.Sprintf("use a value %s %s", boundWords[m[1]], m[2])
		}
	case "minItems":
		diag.Code = "too-few"
		diag.Msg = fmt.Sprintf("%s is empty", where)
		diag.Hint = "add at least one"
	default:
		diag.Msg = fmt.Sprintf("%s: %s", where, ve.Message)
		if h := patternHint(ve.AbsoluteKeywordLocation + " " + ve.KeywordLocation); h != "" {
			diag.Hint = h
		}
	}
	return diag
}

// bound reads the comparison and limit of a range message ("must be <= 1000
// but found 5000").
var bound = regexp.MustCompile(`must be (>=|<=|>|<) ([-0-9.e+]+)`)

// boundWords says each comparison of bound in words.
var boundWords = map[string]string{">=": "of at least", "<=": "of at most", ">": "above", "<": "below"}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

func expectedOf(msg string) string {
	// "expected string, but got number"
	if e, ok := strings.CutPrefix(msg, "expected "); ok {
		if i := strings.Index(e, ", but"); i >= 0 {
			e = e[:i]
		}
		switch e {
		case "object":
			return "a mapping"
		case "array":
			return "a list"
		case "integer":
			return "a whole number"
		case "string":
			return "text"
		case "boolean":
			return "true or false"
		}
		return "a " + e
	}
	return "the expected type"
}

func scalarText(n *node) string {
	if n.kind != kScalar {
		return "not a single value"
	}
	if s, ok := n.value.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(n.value)
}

// patternHint explains a pattern failure by the schema definition it came
// from, where there is a known one.
func patternHint(kwLoc string) string {
	switch {
	case strings.Contains(kwLoc, "/$defs/pluginName"):
		return "a plugin name uses letters, digits and dashes only"
	case strings.Contains(kwLoc, "/$defs/duration"):
		return `write a duration such as "500ms", "2s", "15m" or "1h"`
	case strings.Contains(kwLoc, "/$defs/size"):
		return "write a size such as 64KiB or 1MiB (B, KiB, MiB, GiB), or a whole number of bytes"
	case strings.Contains(kwLoc, "/$defs/handler"):
		return `write it as <plugin>.<handler>, e.g. "orders.validate"`
	case strings.Contains(kwLoc, "/$defs/name"), strings.Contains(kwLoc, "/$defs/wireName"):
		return "a name that reaches the wire starts with a letter or digit and uses letters, digits, dashes and dots only"
	case strings.Contains(kwLoc, "/$defs/exchangeName"):
		return "an exchange name uses letters, digits, dashes, underscores, dots and colons"
	case strings.Contains(kwLoc, "/$defs/typeRef"), strings.Contains(kwLoc, "/$defs/outputRef"):
		return "name a type declared under types"
	case strings.Contains(kwLoc, "/properties/version"):
		return "write version: " + Version
	}
	return ""
}

func pointer(loc string) []string {
	if loc == "" || loc == "/" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(loc, "/"), "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts
}

func child(n *node, seg string) *node {
	switch n.kind {
	case kMap:
		return n.get(seg)
	case kSeq:
		i, err := strconv.Atoi(seg)
		if err != nil || i < 0 || i >= len(n.items) {
			return nil
		}
		return n.items[i]
	}
	return nil
}

// describe names a location for a person: "pipelines[0].steps[1].retry".
func describe(segs []string) string {
	if len(segs) == 0 {
		return "the flow"
	}
	var b strings.Builder
	for _, s := range segs {
		if _, err := strconv.Atoi(s); err == nil {
			b.WriteString("[" + s + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// acceptedKeys lists the properties of the object schema at the keyword
// location of an additionalProperties failure.
func acceptedKeys(kwLoc string) []string {
	doc := flowSchemaDoc()
	segs := pointer(strings.TrimSuffix(kwLoc, "/additionalProperties"))
	cur := doc
	for _, s := range segs {
		if s == "$ref" {
			continue // resolved below, before the next key is looked up
		}
		cur = resolveRef(doc, cur)
		switch c := cur.(type) {
		case map[string]any:
			cur = c[s]
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	cur = resolveRef(doc, cur)
	m, _ := cur.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func resolveRef(doc, cur any) any {
	for range 8 {
		m, ok := cur.(map[string]any)
		if !ok {
			return cur
		}
		ref, ok := m["$ref"].(string)
		if !ok || !strings.HasPrefix(ref, "#/") || len(m) > 3 && m["properties"] != nil {
			return cur
		}
		next := doc
		for _, s := range pointer(strings.TrimPrefix(ref, "#")) {
			mm, ok := next.(map[string]any)
			if !ok {
				return cur
			}
			next = mm[s]
		}
		cur = next
	}
	return cur
}

// closest returns the accepted key nearest to key, if it is near enough to
// be a typo.
func closest(key string, accepted []string) string {
	best, bestD := "", len(key)/2+1
	if bestD > 3 {
		bestD = 3
	}
	for _, a := range accepted {
		if d := levenshtein(key, a); d < bestD || d == bestD && best == "" && d <= 2 {
			best, bestD = a, d
		}
	}
	if best != "" && levenshtein(key, best) > 2 && !strings.HasPrefix(best, key) {
		return ""
	}
	return best
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
