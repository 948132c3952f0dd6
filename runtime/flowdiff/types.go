package flowdiff

import (
	"encoding/json"
	"fmt"
	"path"
	"reflect"
	"slices"
	"strings"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// types compares the payload type each consumer kept by id reads: a reader
// of the new type must accept every message the old type let a writer put
// in its queue (BACKWARD). Readers of one change are reported together.
func (d *differ) types() {
	type group struct {
		change  Change
		readers []string
		queues  []string
	}
	groups := map[string]*group{}
	var order []string
	for _, oc := range d.op.Consumers {
		nc := d.nc[oc.ID]
		if nc == nil || oc.Input == "" && nc.Input == "" {
			continue
		}
		var p *problem
		ot, nt := typeOf(oc.File, oc.Input), typeOf(nc.File, nc.Input)
		if ot.IsAvro() || nt.IsAvro() {
			if ot.IsAvro() && nt.IsAvro() && ot.Avro.Canonical == nt.Avro.Canonical {
				continue // the same schema, or docs and defaults alone changed
			}
			p = avroNarrowing(nt, ot)
		} else {
			od, nd := d.typeDoc(d.old, oc.File, oc.Input), d.typeDoc(d.new, nc.File, nc.Input)
			if reflect.DeepEqual(bare(od), bare(nd)) {
				continue // the same, or annotations alone changed
			}
			p = narrowing(nd, od)
		}
		key := fmt.Sprintf("%t|%s|%s|%s|%s", p != nil, fileOf(nc.File), nc.Input, fileOf(oc.File), oc.Input)
		g := groups[key]
		if g == nil {
			g = &group{change: d.typeChange(&oc, nc, p)}
			groups[key] = g
			order = append(order, key)
		}
		g.readers = append(g.readers, what(nc))
		g.queues = append(g.queues, owned(d.op, oc.ID)...)
	}
	for _, key := range order {
		g := groups[key]
		c := g.change
		verb := "read"
		if len(g.readers) == 1 {
			verb = "reads"
		}
		c.Msg = strings.ReplaceAll(strings.ReplaceAll(c.Msg, "\x00R", strings.Join(g.readers, ", ")), "\x00V", verb)
		if c.Breaking {
			slices.Sort(g.queues)
			c.Queues = slices.Compact(g.queues)
		}
		d.add(c)
	}
	d.typeDeclarations()
}

func fileOf(f *spec.Flow) string {
	if f == nil {
		return ""
	}
	return f.File
}

func (d *differ) typeChange(oc, nc *plan.Consumer, p *problem) Change {
	pos := nc.At
	if t := typeOf(nc.File, nc.Input); t != nil && nc.Input == oc.Input {
		pos = t.Pos
	}
	name := func(t string) string {
		if t == "" {
			return "any JSON value (no input)"
		}
		return fmt.Sprintf("type %q", t)
	}
	// \x00R stands for the readers and \x00V for the verb that agrees with
	// them, filled in once every reader of the change is known.
	var narrowed, widened string
	if nc.Input == oc.Input {
		narrowed = fmt.Sprintf("%s, read by \x00R, is narrowed", name(nc.Input))
		widened = fmt.Sprintf("%s, read by \x00R, changes and accepts everything it did", name(nc.Input))
	} else {
		narrowed = fmt.Sprintf("\x00R now \x00V %s instead of %s, which is narrower", name(nc.Input), name(oc.Input))
		widened = fmt.Sprintf("\x00R now \x00V %s instead of %s, which accepts everything the old one did", name(nc.Input), name(oc.Input))
	}
	if p == nil {
		return Change{Kind: TypeWidened, Pos: pos, Msg: widened, InFlight: "messages written under the old type still validate"}
	}
	return Change{Kind: TypeNarrowed, Breaking: true, Pos: pos,
		Msg: fmt.Sprintf("%s, so it may refuse what a writer with the old one wrote: at %s, %s", narrowed, p.path, p.reason),
		InFlight: "messages written under the old type, waiting in its readers' queues, retry queues and .dlq, may fail the new type " +
			"and are then dead-lettered as fatal when delivered",
		Deploy: "widen it instead (accept what the old type did: a new field optional, old values still allowed), " +
			"or drain first: stop the writers and wait until the readers' queues are empty, then deploy"}
}

func typeOf(f *spec.Flow, name string) *spec.Type {
	if f == nil || name == "" {
		return nil
	}
	return f.Type(name)
}

// typeDeclarations lists types added to and removed from a flow file of
// the same flow name; changes to the types consumers read are types'.
func (d *differ) typeDeclarations() {
	byName := func(fs []*spec.Flow) map[string]*spec.Flow {
		m := map[string]*spec.Flow{}
		for _, f := range fs {
			m[f.Name] = f
		}
		return m
	}
	of, nf := byName(d.old.Flows), byName(d.new.Flows)
	for _, n := range d.new.Flows {
		o := of[n.Name]
		if o == nil {
			continue
		}
		for _, t := range n.Types {
			if o.Type(t.Name) == nil {
				d.add(Change{Kind: TypeAdded, Pos: t.Pos, Msg: fmt.Sprintf("type %q is added to flow %q", t.Name, n.Name)})
			}
		}
	}
	for _, o := range d.old.Flows {
		n := nf[o.Name]
		if n == nil {
			continue
		}
		for _, t := range o.Types {
			if n.Type(t.Name) == nil {
				d.add(Change{Kind: TypeRemoved, Pos: t.Pos, Old: true, Msg: fmt.Sprintf("type %q is removed from flow %q", t.Name, o.Name)})
			}
		}
	}
}

// typeDoc is the schema document of type name in flow f, with every $ref
// it can follow inlined; true (any JSON value) for no type.
func (d *differ) typeDoc(side Side, f *spec.Flow, name string) any {
	t := typeOf(f, name)
	if t == nil {
		return true
	}
	var doc any
	if err := json.Unmarshal(t.Schema, &doc); err != nil {
		return string(t.Schema) // compared as text: equal or not
	}
	// An inline type lives beside its flow file (spec resolves it there).
	base := path.Join(f.Dir, path.Base(f.File))
	r := resolver{read: side.ReadFile}
	doc = r.resolve(doc, base, doc, 0)
	if hasRef(doc) {
		return doc // a $ref left (a cycle): its $defs stay, compared as written
	}
	return stripDefs(doc)
}

func hasRef(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if _, ok := x.(string); ok && k == "$ref" {
				return true
			}
			if k != "enum" && k != "const" && k != "default" && k != "examples" && hasRef(x) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if hasRef(x) {
				return true
			}
		}
	}
	return false
}

type resolver struct {
	read func(string) ([]byte, error)
}

// maxRefDepth bounds $ref inlining: a cycle stays a $ref, compared as
// written.
const maxRefDepth = 16

func (r resolver) resolve(v any, base string, root any, depth int) any {
	switch v := v.(type) {
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = r.resolve(x, base, root, depth)
		}
		return out
	case map[string]any:
		ref, isRef := v["$ref"].(string)
		out := map[string]any{}
		for k, x := range v {
			if k == "enum" || k == "const" || k == "default" || k == "examples" {
				out[k] = x // data, not schema
				continue
			}
			out[k] = r.resolve(x, base, root, depth)
		}
		if !isRef || depth >= maxRefDepth {
			return out
		}
		target, tbase, troot, ok := r.follow(ref, base, root)
		if !ok {
			return out
		}
		resolved := r.resolve(target, tbase, troot, depth+1)
		delete(out, "$ref")
		if len(out) == 0 {
			return resolved
		}
		if m, ok := resolved.(map[string]any); ok {
			merged := map[string]any{}
			for k, x := range m {
				merged[k] = x
			}
			for k, x := range out {
				merged[k] = x
			}
			return merged
		}
		out["allOf"] = []any{resolved}
		return out
	}
	return v
}

// follow finds what ref points at: a file beside base (read through
// r.read) and a JSON pointer in it, or a pointer in root.
func (r resolver) follow(ref, base string, root any) (target any, tbase string, troot any, ok bool) {
	file, frag, _ := strings.Cut(ref, "#")
	tbase, troot = base, root
	if file != "" {
		if r.read == nil || strings.Contains(file, ":") {
			return nil, "", nil, false
		}
		tbase = path.Join(path.Dir(base), file)
		data, err := r.read(tbase)
		if err != nil || json.Unmarshal(data, &troot) != nil {
			return nil, "", nil, false
		}
	}
	target, ok = pointer(troot, frag)
	return target, tbase, troot, ok
}

func pointer(doc any, frag string) (any, bool) {
	if frag == "" || frag == "/" {
		return doc, true
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, false // an anchor: not followed
	}
	cur := doc
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// stripDefs drops $defs and definitions once their $refs are inlined: they
// are places to refer to, not constraints.
func stripDefs(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if k == "$defs" || k == "definitions" {
				continue
			}
			if k == "enum" || k == "const" || k == "default" || k == "examples" {
				out[k] = x
				continue
			}
			out[k] = stripDefs(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = stripDefs(x)
		}
		return out
	}
	return v
}

// annotations are the keywords that describe a schema without
// constraining it.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$comment": true,
	"$schema": true, "$id": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// bare is a schema without its annotations (title, description, ...),
// for telling a change of meaning from a change of words.
func bare(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			switch {
			case annotations[k]:
			case k == "enum" || k == "const":
				out[k] = x
			case k == "properties" || k == "patternProperties" || k == "dependentSchemas" || k == "$defs" || k == "definitions":
				m, _ := x.(map[string]any)
				sub := map[string]any{}
				for name, s := range m {
					sub[name] = bare(s)
				}
				out[k] = sub
			default:
				out[k] = bare(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = bare(x)
		}
		return out
	}
	return v
}
