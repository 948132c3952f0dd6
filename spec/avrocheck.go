package spec

import (
	"math"

	"github.com/hamba/avro/v2"

	"github.com/acemq/acemq-flow/internal/jsonscan"
)

// avroCheck is a check-only plan of an Avro schema for the JSON a handler
// writes: in one pass over the text, with no tree, it tells whether the
// JSON surely fits the schema by the mapping of avro_json.go (the same
// verdict DecodeJSON and AvroFromJSON give). It covers null, boolean, int,
// long, float, double, string, enum, array, map, record (recursive ones
// too) and union; bytes, fixed and every logical type are never taken
// here (kind never). fits saying false means only "not surely": the
// caller then decides by the tree, which gives the error and its text.
type avroCheck struct {
	kind    checkKind
	items   *avroCheck   // array items, map values
	symbols []string     // enum
	fields  []checkField // record, in the schema's order
	union   []*avroCheck // union branches
	names   [][2]string  // union: each branch's name and type, the keys of {"<branch>": value}
	null    bool         // union: has a null branch
}

type checkKind uint8

const (
	checkNever checkKind = iota
	checkNull
	checkBoolean
	checkInt
	checkLong
	checkFloat // float and double: AvroFromJSON takes the same JSON for both
	checkString
	checkEnum
	checkArray
	checkMap
	checkRecord
	checkUnion
)

type checkField struct {
	name   string
	check  *avroCheck
	hasDef bool // missing from the JSON, the field takes its default
}

// checkMaxDepth bounds nesting on the check: deeper JSON is left to the
// tree.
const checkMaxDepth = 64

// compileAvroCheck returns the check of schema s; never nil.
func compileAvroCheck(s avro.Schema) *avroCheck {
	return compileCheck(s, map[string]*avroCheck{})
}

func compileCheck(s avro.Schema, records map[string]*avroCheck) *avroCheck {
	s = deref(s)
	if logicalOf(s) != nil {
		return &avroCheck{}
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		return &avroCheck{kind: checkNull}
	case *avro.PrimitiveSchema:
		switch s.Type() {
		case avro.Null:
			return &avroCheck{kind: checkNull}
		case avro.Boolean:
			return &avroCheck{kind: checkBoolean}
		case avro.Int:
			return &avroCheck{kind: checkInt}
		case avro.Long:
			return &avroCheck{kind: checkLong}
		case avro.Float, avro.Double:
			return &avroCheck{kind: checkFloat}
		case avro.String:
			return &avroCheck{kind: checkString}
		}
	case *avro.EnumSchema:
		return &avroCheck{kind: checkEnum, symbols: s.Symbols()}
	case *avro.ArraySchema:
		return &avroCheck{kind: checkArray, items: compileCheck(s.Items(), records)}
	case *avro.MapSchema:
		return &avroCheck{kind: checkMap, items: compileCheck(s.Values(), records)}
	case *avro.UnionSchema:
		c := &avroCheck{kind: checkUnion}
		for _, t := range s.Types() {
			if deref(t).Type() == avro.Null {
				c.null = true
			}
			c.union = append(c.union, compileCheck(t, records))
			// The names unionFromJSON takes a branch by.
			c.names = append(c.names, [2]string{branchName(t), string(deref(t).Type())})
		}
		return c
	case *avro.RecordSchema:
		if c, ok := records[s.FullName()]; ok {
			return c
		}
		c := &avroCheck{kind: checkRecord}
		records[s.FullName()] = c
		for _, f := range s.Fields() {
			c.fields = append(c.fields, checkField{name: f.Name(), check: compileCheck(f.Type(), records), hasDef: f.HasDefault()})
		}
		return c
	}
	return &avroCheck{}
}

// fits reports whether the JSON document body surely fits c: it is one
// JSON value (whitespace around it only) that AvroFromJSON takes. A nil
// check fits nothing.
func (c *avroCheck) fits(body []byte) bool {
	if c == nil {
		return false
	}
	st := jsonscan.Scanner{In: body}
	if !c.value(&st, 0) {
		return false
	}
	st.WS()
	return st.Pos == len(st.In)
}

func (c *avroCheck) value(st *jsonscan.Scanner, depth int) bool {
	if depth > checkMaxDepth {
		return false
	}
	ch := st.Peek()
	switch c.kind {
	case checkNull:
		return ch == 'n' && st.Literal("null")
	case checkBoolean:
		switch ch {
		case 't':
			return st.Literal("true")
		case 'f':
			return st.Literal("false")
		}
		return false
	case checkInt, checkLong:
		if ch != '-' && (ch < '0' || ch > '9') {
			return false
		}
		n, whole, ok := st.Integer()
		if !ok || !whole {
			return false
		}
		return c.kind == checkLong || n >= math.MinInt32 && n <= math.MaxInt32
	case checkFloat:
		if ch == '"' {
			// "NaN", "Infinity" and "-Infinity" are numbers too (float);
			// no other string is.
			k, ok := st.ReadString()
			if !ok {
				return false
			}
			switch string(k) {
			case "NaN", "Infinity", "-Infinity":
				return true
			}
			return false
		}
		if ch != '-' && (ch < '0' || ch > '9') {
			return false
		}
		_, ok := st.Double()
		return ok
	case checkString:
		if ch != '"' {
			return false
		}
		_, ok := st.ReadString()
		return ok
	case checkEnum:
		if ch != '"' {
			return false
		}
		k, ok := st.ReadString()
		if !ok {
			return false
		}
		for _, sym := range c.symbols {
			if sym == string(k) {
				return true
			}
		}
		return false
	case checkArray:
		return ch == '[' && c.array(st, depth)
	case checkMap:
		return ch == '{' && c.mapValue(st, depth)
	case checkRecord:
		return ch == '{' && c.record(st, depth)
	case checkUnion:
		return c.unionValue(st, ch, depth)
	}
	return false
}

func (c *avroCheck) array(st *jsonscan.Scanner, depth int) bool {
	st.Pos++ // '['
	if st.Peek() == ']' {
		st.Pos++
		return true
	}
	for {
		if !c.items.value(st, depth+1) {
			return false
		}
		if more, ok := st.Next(']'); !more {
			return ok
		}
	}
}

// mapValue checks an Avro map: every value fits (a key given twice is
// then no matter: whichever encoding/json keeps fits).
func (c *avroCheck) mapValue(st *jsonscan.Scanner, depth int) bool {
	st.Pos++ // '{'
	if st.Peek() == '}' {
		st.Pos++
		return true
	}
	for {
		if _, ok := st.ReadString(); !ok || !st.Colon() {
			return false
		}
		if !c.items.value(st, depth+1) {
			return false
		}
		if more, ok := st.Next('}'); !more {
			return ok
		}
	}
}

func (c *avroCheck) record(st *jsonscan.Scanner, depth int) bool {
	st.Pos++ // '{'
	var small [64]bool
	seen := small[:0]
	if len(c.fields) <= len(small) {
		seen = small[:len(c.fields)]
	} else {
		seen = make([]bool, len(c.fields))
	}
	if st.Peek() == '}' {
		st.Pos++
	} else {
		for {
			k, ok := st.ReadString()
			if !ok {
				return false
			}
			i := -1
			for j := range c.fields {
				if c.fields[j].name == string(k) {
					i = j
					break
				}
			}
			// A key the record has no field for is an error; a key given
			// twice is left to the tree (encoding/json keeps the last).
			if i < 0 || seen[i] {
				return false
			}
			seen[i] = true
			if !st.Colon() || !c.fields[i].check.value(st, depth+1) {
				return false
			}
			more, ok := st.Next('}')
			if !ok {
				return false
			}
			if !more {
				break
			}
		}
	}
	for i := range c.fields {
		if !seen[i] && !c.fields[i].hasDef {
			return false
		}
	}
	return true
}

// unionValue checks a union as unionFromJSON takes one: null if it has a
// null branch; else a value that fits any other branch (unionFromJSON
// takes the first that does, so the value is valid whichever fits here);
// else {"<branch>": value} with the value fitting the first branch that
// key names.
func (c *avroCheck) unionValue(st *jsonscan.Scanner, ch byte, depth int) bool {
	if ch == 'n' {
		return c.null && st.Literal("null")
	}
	from := st.Pos
	for _, b := range c.union {
		if b.kind == checkNull {
			continue
		}
		if b.value(st, depth+1) {
			return true
		}
		st.Pos = from
	}
	if ch != '{' {
		return false
	}
	st.Pos++
	k, ok := st.ReadString()
	if !ok {
		return false
	}
	i := -1
	for j, n := range c.names {
		if n[0] == string(k) || n[1] == string(k) {
			i = j
			break
		}
	}
	if i < 0 || !st.Colon() || !c.union[i].value(st, depth+1) {
		return false
	}
	// The object must have that one key only.
	if st.Peek() != '}' {
		return false
	}
	st.Pos++
	return true
}
