package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/hamba/avro/v2"
)

// AvroSchema is the Avro schema of a type written `avro: …` (FLOW-FORMAT
// §6): a $ref to an .avsc file beside the flow, or the schema inline as a
// mapping. It is parsed at load time, each type on its own (a named type
// of one type's schema is never resolved through another's).
type AvroSchema struct {
	Pos
	Ref string `yaml:"$ref"` // the $ref as written, if any
	// Schema is the parsed schema, the reader's schema of the type.
	Schema avro.Schema `yaml:"-"`
	// Canonical is the schema's Parsing Canonical Form (logical types kept),
	// the form its registry id is taken from.
	Canonical string `yaml:"-"`
	// Text is the schema as JSON with its defaults, docs and aliases: what
	// is registered under the type's subject.
	Text string `yaml:"-"`

	node  *node      // the value under avro:, until parsed
	check *avroCheck // the one-pass check of a handler's JSON, once parsed
}

// IsAvro reports whether the type is an Avro schema rather than JSON Schema.
func (t *Type) IsAvro() bool { return t != nil && t.Avro != nil }

// compiled reports whether the type's schema compiled: a JSON Schema or a
// parsed Avro schema.
func (t *Type) compiled() bool {
	if t == nil {
		return false
	}
	if t.Avro != nil {
		return t.Avro.Schema != nil
	}
	return t.schema != nil
}

// SubjectFor is the registry subject of a type that names none: the flow's
// name and the type's, `<flow>.<type>`.
func SubjectFor(flow, typ string) string { return flow + "." + typ }

// avroType reads a type written `avro: …`: the schema's node (parsed in
// compileAvro, where the flow's file system is at hand), the subject, and
// the claim check.
func (b *builder) avroType(flowName string, t *Type, v *node) {
	an := v.get("avro")
	t.Avro = &AvroSchema{Pos: v.keyPos("avro"), node: an}
	t.Avro.Ref, _ = b.str(an, "$ref")
	if an.get("$ref") != nil && len(an.keys) > 1 {
		b.d.errorf(an.pos, "avro-ref-alone", "write the schema in the .avsc file, or inline without $ref",
			"type %q has $ref and other keys under avro: the schema is the file's, and the other keys would be ignored", t.Name)
	}
	t.Subject = SubjectFor(flowName, t.Name)
	t.SubjectPos = t.Pos
	if s, at := b.str(v, "subject"); v.get("subject") != nil {
		t.Subject, t.SubjectPos = s, at
	}
	if v.get("claim_check") != nil {
		c := b.claimCheck(v.get("claim_check"), ClaimCheck{Above: DefaultClaimCheckAbove}, "types."+t.Name+".claim_check.above")
		t.ClaimCheck = &c
	}
}

// subjectWithoutAvro refuses `subject` on a JSON Schema type (only an
// Avro type is registered), and takes it out of the schema document.
func (b *builder) subjectWithoutAvro(name string, v *node, doc any) any {
	m, ok := doc.(map[string]any)
	if !ok || v.get("subject") == nil {
		return doc
	}
	b.d.errorf(v.keyPos("subject"), "subject-without-avro", "remove it, or write the type's schema under `avro:`",
		"type %q sets subject, which only an Avro type has: a JSON Schema type is not registered", name)
	delete(m, "subject")
	return m
}

// compileAvro parses the Avro schema of t, reading a $ref from the flow's
// folder. A schema that does not parse is reported at the field it fails
// on, in the flow file or in the .avsc file, with hamba/avro's reason.
func (c *fileChecker) compileAvro(tc *typeCompiler, t *Type) {
	a := t.Avro
	n, file := a.node, t.Pos.File
	if a.Ref != "" {
		fsPath, display, err := tc.avroRef(a.Ref, t.Pos.File)
		if err != nil {
			hint := "name an .avsc file inside the flow file's folder, relative to the flow file"
			if errors.As(err, new(refOutside)) {
				hint = "keep $ref files inside the flow file's folder"
			}
			c.d.errorf(n.keyPos("$ref"), "invalid-type", hint, "type %q: %v", t.Name, err)
			return
		}
		data, err := fs.ReadFile(tc.fsys, fsPath)
		if err != nil {
			c.d.errorf(n.keyPos("$ref"), "invalid-type", "check the path, relative to the flow file", "type %q: $ref file %s cannot be read: %v", t.Name, display, unwrapPathError(err))
			return
		}
		if len(data) > MaxFileSize {
			c.d.errorf(n.keyPos("$ref"), "invalid-type", "split the schema", "type %q: $ref file %s is over the %d byte limit", t.Name, display, MaxFileSize)
			return
		}
		// JSON is YAML: read as a node tree, the file's positions are known
		// for the field a schema fails on. No ${VAR} is substituted in it.
		pd := &diags{}
		n = parseYAML(display, data, func(name string) (string, bool) { return "${" + name + "}", true }, pd)
		if n == nil || pd.hasErrors() {
			msg := "it is not JSON"
			if len(pd.list) > 0 {
				msg = pd.list[0].Msg
			}
			c.d.errorf(t.Avro.Pos, "invalid-type", "fix the .avsc file: an Avro schema is JSON", "type %q: $ref file %s does not parse: %s", t.Name, display, msg)
			return
		}
		file = display
	}
	raw, err := json.Marshal(n.toJSON())
	if err != nil {
		c.d.errorf(n.pos, "invalid-type", "write the schema in JSON's values", "type %q is not a valid Avro schema: %v", t.Name, err)
		return
	}
	s, err := parseAvro(raw, "", &avro.SchemaCache{})
	if err != nil {
		at := locateAvroError(n)
		if at.File == "" {
			at.File = file
		}
		c.d.errorf(at, "invalid-type", "fix the schema (Avro 1.11: https://avro.apache.org/docs/1.11.1/specification/)", "type %q is not a valid Avro schema: %s", t.Name, avroMessage(err))
		return
	}
	full, err := json.Marshal(s)
	if err != nil {
		c.d.errorf(n.pos, "invalid-type", "fix the schema", "type %q is not a valid Avro schema: %s", t.Name, avroMessage(err))
		return
	}
	a.Schema, a.Canonical, a.Text = s, s.String(), string(full)
	a.check = compileAvroCheck(s)
	t.Schema = json.RawMessage(full)
	a.node = nil
}

// parseAvro is hamba/avro's parser, a panic in it (on a schema no one
// meant) an error: a bad file, not a crash of the validator.
func parseAvro(raw []byte, namespace string, cache *avro.SchemaCache) (s avro.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("the schema could not be parsed (%v)", r)
		}
	}()
	return avro.ParseBytesWithCache(raw, namespace, cache)
}

// avroRef resolves an .avsc $ref against the flow file's folder: its path
// in the flow's file system, and its name for positions.
func (tc *typeCompiler) avroRef(ref, flowDisplay string) (fsPath, display string, err error) {
	if strings.HasPrefix(ref, "/") || strings.Contains(ref, "://") {
		return "", "", refOutside{ref: ref}
	}
	p := path.Clean(path.Join(tc.dir, ref))
	if tc.dir != "." && !strings.HasPrefix(p, tc.dir+"/") || p == ".." || strings.HasPrefix(p, "../") {
		return "", "", refOutside{ref: ref}
	}
	return p, path.Join(path.Dir(flowDisplay), ref), nil
}

// avroMessage turns hamba/avro's error into the end of a sentence.
func avroMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "avro: ")
	msg = strings.TrimSuffix(strings.TrimSpace(msg), ".")
	return strings.ReplaceAll(msg, "\n", " ")
}

// locateAvroError finds the node of an Avro schema that fails to parse:
// the deepest part that fails on its own while the parts before it (whose
// named types it may use) parse. Parts are tried in document order, in one
// cache, so a name defined earlier resolves as in the whole schema.
func locateAvroError(n *node) Pos {
	cache := &avro.SchemaCache{}
	probe := 0
	parses := func(v any, ns string) bool {
		raw, err := json.Marshal(v)
		if err != nil {
			return false
		}
		_, err = parseAvro(raw, ns, cache)
		return err == nil
	}
	var walk func(n *node, ns string) (Pos, bool)
	walk = func(n *node, ns string) (Pos, bool) {
		if n == nil {
			return Pos{}, false
		}
		if parses(n.toJSON(), ns) {
			return Pos{}, false
		}
		switch n.kind {
		case kSeq: // a union: its first failing branch
			for _, it := range n.items {
				if p, ok := walk(it, ns); ok {
					return p, true
				}
			}
		case kMap:
			inner := ns
			if name, ok := n.get("name").str(); ok {
				if i := strings.LastIndex(name, "."); i >= 0 {
					inner = name[:i]
				} else if nsv, ok := n.get("namespace").str(); ok {
					inner = nsv
				}
			}
			typ, _ := n.get("type").str()
			switch typ {
			case "record", "error":
				if fs := n.get("fields"); fs != nil && fs.kind == kSeq {
					for _, f := range fs.items {
						probe++
						rec := map[string]any{"type": "record", "name": fmt.Sprintf("acemq_probe_%d", probe), "namespace": inner, "fields": []any{f.toJSON()}}
						if parses(rec, inner) {
							continue
						}
						if p, ok := walk(f.get("type"), inner); ok {
							return p, true
						}
						if f.get("default") != nil {
							return f.keyPos("default"), true
						}
						return f.pos, true
					}
				}
			case "array":
				if p, ok := walk(n.get("items"), ns); ok {
					return p, true
				}
			case "map":
				if p, ok := walk(n.get("values"), ns); ok {
					return p, true
				}
			default:
				if t := n.get("type"); t != nil && t.kind != kScalar {
					if p, ok := walk(t, ns); ok {
						return p, true
					}
				}
			}
		}
		return n.pos, true
	}
	p, _ := walk(n, "")
	if p.Line == 0 {
		return n.pos
	}
	return p
}
