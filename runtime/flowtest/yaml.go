package flowtest

import (
	"fmt"
	"math"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/acemq/acemq-flow/spec"
)

type kind uint8

const (
	kScalar kind = iota + 1
	kMap
	kSeq
)

// node is a YAML value of a test file with its position: where an
// expectation that fails is reported, and where --update rewrites it.
type node struct {
	kind  kind
	pos   spec.Pos
	keys  []*node
	vals  []*node
	items []*node
	value any // kScalar: string, int64, float64, bool or nil
	ast   ast.Node
}

func (n *node) get(key string) *node {
	if n == nil || n.kind != kMap {
		return nil
	}
	for i, k := range n.keys {
		if k.value == key {
			return n.vals[i]
		}
	}
	return nil
}

func (n *node) str() (string, bool) {
	if n == nil || n.kind != kScalar {
		return "", false
	}
	s, ok := n.value.(string)
	return s, ok
}

// toJSON is the node as a JSON value (maps, slices, scalars).
func (n *node) toJSON() any {
	if n == nil {
		return nil
	}
	switch n.kind {
	case kMap:
		m := make(map[string]any, len(n.keys))
		for i, k := range n.keys {
			m[fmt.Sprint(k.value)] = n.vals[i].toJSON()
		}
		return m
	case kSeq:
		s := make([]any, len(n.items))
		for i, it := range n.items {
			s[i] = it.toJSON()
		}
		return s
	}
	if i, ok := n.value.(int64); ok {
		return float64(i)
	}
	return n.value
}

// parseYAML reads a test file into nodes; a syntax error comes back as a
// diagnostic at its position.
func parseYAML(file string, data []byte) (root *node, err error) {
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, fmt.Errorf("%s: the YAML could not be parsed (%v); check its syntax", file, r)
		}
	}()
	f, perr := parser.ParseBytes(data, 0)
	if perr != nil {
		return nil, fmt.Errorf("%s: %v", file, perr)
	}
	for _, doc := range f.Docs {
		if doc.Body == nil {
			continue
		}
		if _, ok := doc.Body.(*ast.CommentGroupNode); ok {
			continue
		}
		c := &converter{file: file, anchors: map[string]*node{}}
		return c.convert(doc.Body), nil
	}
	return nil, fmt.Errorf("%s: the file holds no YAML document; start it with `version: acemq.flowtest/v1`", file)
}

type converter struct {
	file    string
	anchors map[string]*node
}

func posOf(file string, n ast.Node) spec.Pos {
	if n == nil {
		return spec.Pos{File: file}
	}
	if m, ok := n.(*ast.MappingNode); ok && len(m.Values) > 0 {
		return posOf(file, m.Values[0])
	}
	if mv, ok := n.(*ast.MappingValueNode); ok && mv.Key != nil {
		return posOf(file, mv.Key)
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return spec.Pos{File: file}
	}
	return spec.Pos{File: file, Line: tk.Position.Line, Col: tk.Position.Column}
}

func (c *converter) convert(an ast.Node) *node {
	if an == nil {
		return nil
	}
	pos := posOf(c.file, an)
	switch n := an.(type) {
	case *ast.DocumentNode:
		return c.convert(n.Body)
	case *ast.TagNode:
		return c.convert(n.Value)
	case *ast.AnchorNode:
		v := c.convert(n.Value)
		if n.Name != nil && v != nil {
			c.anchors[n.Name.GetToken().Value] = v
		}
		return v
	case *ast.AliasNode:
		if n.Value != nil {
			if t, ok := c.anchors[n.Value.GetToken().Value]; ok {
				return t
			}
		}
		return &node{kind: kScalar, pos: pos, ast: an}
	case *ast.MappingNode:
		out := &node{kind: kMap, pos: pos, ast: an}
		for _, mv := range n.Values {
			c.mapValue(out, mv)
		}
		return out
	case *ast.MappingValueNode:
		out := &node{kind: kMap, pos: pos, ast: an}
		c.mapValue(out, n)
		return out
	case *ast.SequenceNode:
		out := &node{kind: kSeq, pos: pos, ast: an}
		for _, v := range n.Values {
			it := c.convert(v)
			if it == nil {
				it = &node{kind: kScalar, pos: posOf(c.file, v), ast: v}
			}
			out.items = append(out.items, it)
		}
		return out
	case *ast.CommentGroupNode:
		return nil
	}
	out := &node{kind: kScalar, pos: pos, ast: an}
	switch n := an.(type) {
	case *ast.NullNode:
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
	case *ast.StringNode:
		out.value = n.Value
	case *ast.LiteralNode:
		if n.Value != nil {
			out.value = n.Value.Value
		} else {
			out.value = ""
		}
	default:
		if tk := an.GetToken(); tk != nil {
			out.value = tk.Value
		}
	}
	return out
}

func (c *converter) mapValue(out *node, mv *ast.MappingValueNode) {
	k := c.convert(mv.Key)
	if k == nil {
		return
	}
	v := c.convert(mv.Value)
	if v == nil {
		v = &node{kind: kScalar, pos: k.pos}
	}
	out.keys = append(out.keys, k)
	out.vals = append(out.vals, v)
}
