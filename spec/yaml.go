package spec

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// Limits on a flow file, so that hostile input gets an error instead of a
// hang or an out-of-memory kill (research/reliability.md §6.2: goccy/go-yaml
// has no alias-expansion limit of its own).
const (
	MaxFileSize = 4 << 20 // bytes read from one flow file
	maxDepth    = 64      // nesting of mappings and sequences
	maxNodes    = 200_000 // nodes after alias expansion
	textWeight  = 64      // bytes of a scalar's text that count as one node
)

type kind uint8

const (
	kScalar kind = iota + 1
	kMap
	kSeq
)

// A Node is a YAML value with its position: the tree a flow file's model
// is built from and its schema is checked against, and what ReadYAML
// returns for other files. Aliases share the anchored node. A Node is not
// changed once read: safe for concurrent use.
type Node struct {
	kind   kind
	pos    Pos
	keys   []*node // kMap: scalar key nodes, in file order
	vals   []*node // kMap: values, parallel to keys
	items  []*node // kSeq
	value  any     // kScalar: string, int64, float64, bool or nil
	subst  bool    // kScalar: the value came (in part) from ${VAR} substitution
	quoted bool    // kScalar: written in quotes, so its text starts a column after pos
	// inexact: kScalar text whose columns do not follow pos on one line (a
	// block or multi-line scalar, escapes, a substitution)
	inexact bool
	merged  map[string]bool // kMap, while read: keys copied by a merge key (<<), which a key written in the mapping overrides
	size    int             // nodes below and including this one, aliases expanded
}

// node is Node inside the package.
type node = Node

// Pos is where the value starts in its file: a mapping's first key.
func (n *Node) Pos() Pos { return n.pos }

// IsMap, IsSeq and IsScalar report what the value is: a mapping, a
// sequence, or a scalar (null included).
func (n *Node) IsMap() bool    { return n != nil && n.kind == kMap }
func (n *Node) IsSeq() bool    { return n != nil && n.kind == kSeq }
func (n *Node) IsScalar() bool { return n != nil && n.kind == kScalar }

// Keys are a mapping's keys, scalar nodes in file order; Vals their
// values, in the same order. Items are a sequence's.
func (n *Node) Keys() []*Node  { return n.keys }
func (n *Node) Vals() []*Node  { return n.vals }
func (n *Node) Items() []*Node { return n.items }

// Value is a scalar's value: a string, int64, float64, bool or nil.
func (n *Node) Value() any { return n.value }

// Get returns the value under key in a mapping, or nil; Str a scalar's
// string and whether it is one. Both take a nil node.
func (n *Node) Get(key string) *Node { return n.get(key) }
func (n *Node) Str() (string, bool)  { return n.str() }

// JSON is the value as encoding/json decodes it into an any (a number is
// an int64 or a float64).
func (n *Node) JSON() any { return n.toJSON() }

func (n *node) str() (string, bool) {
	if n == nil || n.kind != kScalar {
		return "", false
	}
	s, ok := n.value.(string)
	return s, ok
}

// index returns the position of key among a mapping's keys, or -1.
func (n *node) index(key string) int {
	if n == nil || n.kind != kMap {
		return -1
	}
	for i, k := range n.keys {
		if k.value == key {
			return i
		}
	}
	return -1
}

// get returns the value under key in a mapping, or nil.
func (n *node) get(key string) *node {
	if i := n.index(key); i >= 0 {
		return n.vals[i]
	}
	return nil
}

// keyPos returns where key is written in a mapping, or the node's own
// position if it has no such key.
func (n *node) keyPos(key string) Pos {
	if i := n.index(key); i >= 0 {
		return n.keys[i].pos
	}
	return n.pos
}

// toJSON converts the tree to the values encoding/json produces, for the
// JSON Schema check and for payloads.
func (n *node) toJSON() any {
	if n == nil {
		return nil
	}
	switch n.kind {
	case kMap:
		m := make(map[string]any, len(n.keys))
		for i, k := range n.keys {
			m[k.value.(string)] = n.vals[i].toJSON()
		}
		return m
	case kSeq:
		s := make([]any, len(n.items))
		for i, it := range n.items {
			s[i] = it.toJSON()
		}
		return s
	}
	return n.value
}

// yamlParser turns the bytes of one file into a node tree.
type yamlParser struct {
	file    string
	env     func(string) (string, bool)
	d       *diags
	anchors map[string]*node
	total   int
	failed  bool // a limit was hit; stop walking
}

// flowTooDeep reports where flow-style collections ([ and {) in data first
// nest deeper than maxDepth. Quoted text and comments are skipped; a bracket
// in a plain scalar counts, which only matters for text no flow file has.
func flowTooDeep(data []byte) (line, col int, deep bool) {
	depth := 0
	line, col = 1, 0
	var quote byte // ' or " while inside a quoted scalar
	comment := false
	prev := byte('\n')
	for i := 0; i < len(data); i++ {
		c := data[i]
		col++
		switch {
		case c == '\n':
			line, col, comment = line+1, 0, false
			if quote == 0 {
				prev = c
				continue
			}
		case comment:
		case quote == '"' && c == '\\':
			i++ // an escaped character
			col++
		case quote != 0:
			if c == quote {
				if quote == '\'' && i+1 < len(data) && data[i+1] == '\'' {
					i++ // '' inside single quotes
					col++
				} else {
					quote = 0
				}
			}
		case c == '#' && (prev == ' ' || prev == '\t' || prev == '\n'):
			comment = true
		case c == '"' || c == '\'':
			quote = c
		case c == '[' || c == '{':
			if depth++; depth > maxDepth {
				return line, col, true
			}
		case c == ']' || c == '}':
			depth = max(depth-1, 0)
		}
		prev = c
	}
	return 0, 0, false
}

// tooDeep reports, at pos, nesting deeper than maxDepth.
func tooDeep(d *diags, pos Pos) {
	d.errorf(pos, "too-deep", "flatten the structure", "the YAML nests deeper than %d levels", maxDepth)
}

// YAMLKind names a kind of YAML file in ReadYAML's diagnostics.
type YAMLKind struct {
	Name  string // "a flow file"
	Empty string // how to fix an empty file: "start it with `version: …`"
	One   string // how to fix a file of several documents
}

// flowFile is how a flow file is named in diagnostics.
var flowFile = YAMLKind{Name: "a flow file", Empty: "start it with `version: acemq.flow/v1` and `name:`", One: "put each flow in a file of its own"}

// ReadYAML reads the one YAML document of a file into a tree of nodes
// with their positions, as flow files are read and under their limits
// (size, UTF-8 text, nesting, nodes after aliases expanded), for the other
// files of the project that report positions (the flow tests). file names
// the file in positions and diagnostics; no ${VAR} is substituted. It
// returns nil and the reasons when the file cannot be read.
func ReadYAML(file string, data []byte, k YAMLKind) (*Node, Diagnostics) {
	var d diags
	root := readYAML(file, data, nil, &d, k)
	switch {
	case d.hasErrors():
		return nil, d.list
	case root == nil:
		return nil, Diagnostics{{Pos: Pos{File: file, Line: 1, Col: 1}, Severity: Error, Code: "empty-file", Msg: "the file holds no YAML value", Hint: k.Empty}}
	}
	return root, d.list
}

// parseYAML parses one flow file. It returns nil when the file cannot be
// parsed, with the reasons in d.
func parseYAML(file string, data []byte, env func(string) (string, bool), d *diags) *node {
	before := len(d.list)
	root := readYAML(file, data, env, d, flowFile)
	if root == nil && len(d.list) > before {
		return nil
	}
	if root == nil || root.kind != kMap {
		pos := Pos{File: file, Line: 1, Col: 1}
		if root != nil {
			pos = root.pos
		}
		d.errorf(pos, "not-a-mapping", "a flow file is a mapping with `version`, `name` and sections such as `pipelines`",
			"the top level of the file is not a mapping")
		return nil
	}
	return root
}

// readYAML reads the one document of a file of kind k, substituting
// ${VAR} through env (nil: none). It returns nil when the file cannot be
// read, with the reasons in d.
func readYAML(file string, data []byte, env func(string) (string, bool), d *diags, k YAMLKind) (root *node) {
	start := Pos{File: file, Line: 1, Col: 1}
	if len(data) > MaxFileSize {
		d.errorf(start, "file-too-large", "split it into several files in one folder",
			"the file is %d bytes, over the %d byte limit of %s", len(data), MaxFileSize, k.Name)
		return nil
	}
	if at, found := firstNonText(file, data); found {
		d.errorf(at, "not-yaml", "a flow file is YAML text in UTF-8; save it as UTF-8",
			"the file is not UTF-8 text")
		return nil
	}
	defer func() {
		// goccy/go-yaml has panicked on fuzzed input before; a panic in the
		// parser is a bad file, not a crash of the validator.
		if r := recover(); r != nil {
			d.errorf(start, "yaml-syntax", "check the file's YAML syntax", "the YAML could not be parsed (%v)", r)
			root = nil
		}
	}()
	if line, col, deep := flowTooDeep(data); deep {
		// Checked before parsing: the parser's memory grows with the square
		// of flow-style nesting ([[[[…), and a 200 KB file exhausted it.
		tooDeep(d, Pos{File: file, Line: line, Col: col})
		return nil
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		d.list = append(d.list, syntaxDiagnostic(file, err))
		return nil
	}
	var docs []*ast.DocumentNode
	for _, doc := range f.Docs {
		if doc.Body == nil {
			continue
		}
		if _, ok := doc.Body.(*ast.CommentGroupNode); ok {
			continue
		}
		docs = append(docs, doc)
	}
	if len(docs) == 0 {
		d.errorf(start, "empty-file", k.Empty, "the file holds no YAML document")
		return nil
	}
	if len(docs) > 1 {
		d.errorf(posOf(file, docs[1].Body), "multiple-documents", k.One,
			"the file holds %d YAML documents; %s holds one", len(docs), k.Name)
		return nil
	}
	p := &yamlParser{file: file, env: env, d: d, anchors: map[string]*node{}}
	root = p.convert(docs[0].Body, 0, "", false)
	if p.failed {
		return nil
	}
	return root
}

type tokenError interface {
	GetToken() *token.Token
	GetMessage() string
}

// firstNonText is the position of the first byte of data that is not UTF-8
// text (an invalid sequence, or a NUL), and whether there is one.
func firstNonText(file string, data []byte) (Pos, bool) {
	if utf8.Valid(data) && bytes.IndexByte(data, 0) < 0 {
		return Pos{}, false // the common case, without walking rune by rune
	}
	p := Pos{File: file, Line: 1, Col: 1}
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if (r == utf8.RuneError && size == 1) || r == 0 {
			return p, true
		}
		if r == '\n' {
			p.Line, p.Col = p.Line+1, 1
		} else {
			p.Col++
		}
		data = data[size:]
	}
	return p, true
}

func syntaxDiagnostic(file string, err error) (diag Diagnostic) {
	diag = Diagnostic{Pos: Pos{File: file, Line: 1, Col: 1}, Severity: Error, Code: "yaml-syntax",
		Hint: "fix the YAML syntax at this position"}
	var te tokenError
	if errors.As(err, &te) {
		if tk := te.GetToken(); tk != nil && tk.Position != nil {
			diag.Pos.Line, diag.Pos.Col = tk.Position.Line, tk.Position.Column
		}
		msg := te.GetMessage()
		switch {
		case strings.Contains(msg, "duplicate") || strings.Contains(msg, "already defined"):
			diag.Code = "duplicate-key"
			diag.Hint = "remove one of the two"
		case strings.Contains(msg, "'\t'"):
			diag.Hint = "indent with spaces: YAML does not allow tabs"
			msg = "a tab where YAML expects spaces"
		}
		diag.Msg = "invalid YAML: " + msg
		return diag
	}
	diag.Msg = "invalid YAML: " + firstLine(err.Error())
	return diag
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func posOf(file string, n ast.Node) Pos {
	if n == nil {
		return Pos{File: file}
	}
	if m, ok := n.(*ast.MappingNode); ok && len(m.Values) > 0 {
		return posOf(file, m.Values[0])
	}
	if mv, ok := n.(*ast.MappingValueNode); ok && mv.Key != nil {
		return posOf(file, mv.Key)
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return Pos{File: file}
	}
	return Pos{File: file, Line: tk.Position.Line, Col: tk.Position.Column}
}

// Keys under which a substituted value that reads as a number or boolean is
// typed as such (FLOW-FORMAT §1, Loading). Queue arguments are handled apart.
var (
	numberKeys = map[string]bool{"prefetch": true, "concurrency": true, "max_attempts": true, "jitter": true}
	boolKeys   = map[string]bool{"idempotent": true, "auto_startup": true, "dead_letter": true}
)

func (p *yamlParser) count(pos Pos, n int) bool {
	p.total += n
	if p.total > maxNodes && !p.failed {
		p.failed = true
		p.d.errorf(pos, "too-many-nodes", "remove aliases that expand to huge documents, or split the file",
			"the file expands to more than %d YAML nodes (text counting as one node per %d bytes)", maxNodes, textWeight)
	}
	return !p.failed
}

// convert turns an AST node into a node. key is the mapping key the value
// sits under, inArgs whether it is a value of queue `arguments`.
func (p *yamlParser) convert(an ast.Node, depth int, key string, inArgs bool) *node {
	if p.failed || an == nil {
		return nil
	}
	pos := posOf(p.file, an)
	if depth > maxDepth {
		p.failed = true
		tooDeep(p.d, pos)
		return nil
	}
	switch n := an.(type) {
	case *ast.DocumentNode:
		return p.convert(n.Body, depth, key, inArgs)
	case *ast.TagNode:
		inner := p.convert(n.Value, depth, key, inArgs)
		if inner != nil && inner.kind == kScalar && n.Start != nil && n.Start.Value == "!!str" && inner.value != nil {
			inner.value = fmt.Sprint(inner.value)
		}
		return inner
	case *ast.AnchorNode:
		v := p.convert(n.Value, depth, key, inArgs)
		if n.Name != nil && v != nil {
			p.anchors[n.Name.GetToken().Value] = v
		}
		return v
	case *ast.AliasNode:
		name := ""
		if n.Value != nil {
			name = n.Value.GetToken().Value
		}
		target, ok := p.anchors[name]
		if !ok {
			p.d.errorf(pos, "unknown-alias", "define the anchor &"+name+" before using it", "alias *%s refers to no anchor", name)
			return &node{kind: kScalar, pos: pos, size: 1}
		}
		if !p.count(pos, target.size) {
			return nil
		}
		return target
	case *ast.MappingNode:
		out := &node{kind: kMap, pos: pos, size: 1}
		for _, mv := range n.Values {
			p.mapValue(out, mv, depth, inArgs, key == "env")
			if p.failed {
				return nil
			}
		}
		p.count(pos, 1)
		return out
	case *ast.MappingValueNode:
		out := &node{kind: kMap, pos: pos, size: 1}
		p.mapValue(out, n, depth, inArgs, key == "env")
		p.count(pos, 1)
		return out
	case *ast.SequenceNode:
		out := &node{kind: kSeq, pos: pos, size: 1}
		for _, v := range n.Values {
			it := p.convert(v, depth+1, "", false)
			if p.failed {
				return nil
			}
			if it == nil {
				it = &node{kind: kScalar, pos: posOf(p.file, v), size: 1}
			}
			out.items = append(out.items, it)
			out.size += it.size
		}
		p.count(pos, 1)
		return out
	case *ast.CommentGroupNode:
		return nil
	}
	// A scalar.
	out := &node{kind: kScalar, pos: pos, size: 1}
	switch n := an.(type) {
	case *ast.NullNode:
		out.value = nil
	case *ast.BoolNode:
		out.value = n.Value
	case *ast.IntegerNode:
		switch v := n.Value.(type) {
		case int64:
			out.value = v
		case uint64:
			if v > math.MaxInt64 {
				out.value = float64(v)
			} else {
				out.value = int64(v)
			}
		default:
			out.value = fmt.Sprint(v)
		}
	case *ast.FloatNode:
		out.value = n.Value
	case *ast.InfinityNode:
		out.value = n.Value
	case *ast.NanNode:
		out.value = math.NaN()
	case *ast.StringNode:
		out.value = p.substitute(n.Value, out)
		if tk := n.GetToken(); tk != nil {
			out.quoted = tk.Type == token.SingleQuoteType || tk.Type == token.DoubleQuoteType
			raw := strings.TrimSpace(tk.Origin)
			out.inexact = out.subst || strings.ContainsAny(raw, "\n\r") ||
				(tk.Type == token.DoubleQuoteType && strings.Contains(raw, `\`)) ||
				(tk.Type == token.SingleQuoteType && strings.Contains(strings.Trim(raw, "'"), "''"))
		}
	case *ast.LiteralNode:
		s := ""
		if n.Value != nil {
			s = n.Value.Value
		}
		out.value = p.substitute(s, out)
		out.inexact = true
	default:
		tk := an.GetToken()
		if tk != nil {
			out.value = p.substitute(tk.Value, out)
		}
	}
	if s, ok := out.value.(string); ok {
		// Long text weighs as one node per textWeight bytes, so that an
		// alias repeated to a 1 MB string cannot expand to gigabytes while
		// counting as a few nodes.
		out.size += len(s) / textWeight
		if out.subst {
			out.value = typed(s, key, inArgs)
		}
	}
	if f, ok := out.value.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
		p.d.errorf(pos, "not-finite", "write a number", "%v is not a finite number", f)
		out.value = nil
	}
	if !p.count(pos, out.size) {
		return nil
	}
	return out
}

// typed gives a substituted value its number or boolean type where the
// format expects one (FLOW-FORMAT §1): the broker refuses x-message-ttl as a
// string.
func typed(s, key string, inArgs bool) any {
	if inArgs || boolKeys[key] {
		switch s {
		case "true":
			return true
		case "false":
			return false
		}
	}
	if inArgs || numberKeys[key] {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i
		}
		if key == "jitter" {
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				return f
			}
		}
	}
	return s
}

// mapValue adds one entry of a mapping to out. In a plugin's env (envVars)
// the keys are variable names, not the format's keys: a substituted value
// stays text, whatever its name.
func (p *yamlParser) mapValue(out *node, mv *ast.MappingValueNode, depth int, inArgs, envVars bool) {
	if mv == nil {
		return
	}
	kpos := posOf(p.file, mv.Key)
	if _, ok := mv.Key.(*ast.MergeKeyNode); ok {
		p.merge(out, mv, depth, kpos)
		return
	}
	var keyNode ast.Node = mv.Key
	if mk, ok := keyNode.(*ast.MappingKeyNode); ok {
		keyNode = mk.Value
	}
	var name string
	switch k := keyNode.(type) {
	case *ast.StringNode:
		name = k.Value
	case nil:
	default:
		if tk := k.GetToken(); tk != nil {
			name = tk.Value
		}
		switch keyNode.(type) {
		case *ast.MappingNode, *ast.SequenceNode:
			p.d.errorf(kpos, "complex-key", "use a plain string as the key", "a mapping key must be a string")
		}
	}
	override := out.index(name)
	if override >= 0 {
		if !out.merged[name] {
			p.d.errorf(kpos, "duplicate-key", "remove one of the two", "key %q appears twice in this mapping (first at %s)", name, out.keyPos(name))
			return
		}
		// A key written in the mapping overrides the one a merge copied
		// in (YAML merge keys), before or after the <<.
		delete(out.merged, name)
	}
	typedAs := name
	if envVars {
		typedAs = ""
	}
	child := p.convert(mv.Value, depth+1, typedAs, inArgs || name == "arguments")
	if p.failed {
		return
	}
	if child == nil {
		// `key:` with nothing after it is null, positioned after the key.
		child = &node{kind: kScalar, pos: kpos, size: 1}
	}
	key := &node{kind: kScalar, pos: kpos, value: name, size: 1}
	if override >= 0 {
		out.size -= out.vals[override].size
		out.keys[override], out.vals[override] = key, child
		out.size += child.size
		return
	}
	out.keys = append(out.keys, key)
	out.vals = append(out.vals, child)
	out.size += child.size + 1
}

// merge applies a YAML merge key (`<<: *base`): keys not already present are
// copied from the merged mapping(s).
func (p *yamlParser) merge(out *node, mv *ast.MappingValueNode, depth int, kpos Pos) {
	v := p.convert(mv.Value, depth+1, "", false)
	if p.failed || v == nil {
		return
	}
	var srcs []*node
	switch v.kind {
	case kMap:
		srcs = []*node{v}
	case kSeq:
		srcs = v.items
	}
	for _, src := range srcs {
		if src.kind != kMap {
			p.d.errorf(kpos, "bad-merge", "merge only mappings", "the value of a merge key (<<) must be a mapping or a list of mappings")
			return
		}
		for i, k := range src.keys {
			if out.get(k.value.(string)) == nil {
				out.keys = append(out.keys, k)
				out.vals = append(out.vals, src.vals[i])
				out.size += src.vals[i].size + 1
				if out.merged == nil {
					out.merged = map[string]bool{}
				}
				out.merged[k.value.(string)] = true
			}
		}
	}
}

// substitute replaces ${VAR} and ${VAR:default} in s. `$${` is a literal
// `${`. An unset variable without default is an error naming it.
func (p *yamlParser) substitute(s string, n *node) string {
	if p.env == nil || !strings.Contains(s, "${") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			break
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			p.d.errorf(n.pos, "bad-substitution", "close it with }", "the substitution %q is not closed", s[i:])
			b.WriteString(s)
			break
		}
		expr := s[i+2 : i+end]
		name, def, hasDef := strings.Cut(expr, ":")
		b.WriteString(s[:i])
		if !validEnvName(name) {
			p.d.errorf(n.pos, "bad-substitution", "write ${NAME} or ${NAME:default}, NAME being letters, digits and _",
				"%q is not a valid variable substitution", "${"+expr+"}")
		} else if v, ok := p.env(name); ok {
			b.WriteString(v)
		} else if hasDef {
			b.WriteString(def)
		} else {
			p.d.errorf(n.pos, "unset-variable", fmt.Sprintf("set %s in the environment, or give a default: ${%s:value}", name, name),
				"environment variable %s is not set and has no default", name)
		}
		n.subst = true
		s = s[i+end+1:]
	}
	return b.String()
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9') {
			continue
		}
		return false
	}
	return true
}
