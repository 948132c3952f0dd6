package codec

import (
	"encoding/binary"
	"math"

	"github.com/hamba/avro/v2"

	"github.com/acemq/acemq-flow/internal/jsonscan"
)

// fastEncoder writes a handler's JSON output of one schema straight to
// Avro binary (the same bytes spec.DecodeJSON, spec.AvroFromJSON and
// hamba/avro's WriteVal give), with no tree in between. It is compiled for
// the schemas fastDecoder reads (nulls, booleans, ints, longs, doubles,
// strings, enums, records, arrays and unions of these, without logical
// types); any other schema has none (nil). JSON it does not take as
// surely as the general path (invalid JSON or JSON that does not fit the
// schema, a string with invalid UTF-8 or a lone surrogate, a number past
// int64 for an int or long, a number past float64's range, a record
// key given twice, a missing field whose default it did not compute, data
// nested deeper than maxDepth) makes encode report false, and the codec
// encodes the output the general way, which gives the answer or the error
// with its message.
type fastEncoder struct {
	kind    avro.Type
	items   *fastEncoder   // array
	symbols []string       // enum
	fields  []encField     // record, in the schema's order
	union   []*fastEncoder // union branches
	names   [][2]string    // union: each branch's name and type, the keys of {"<branch>": value}
	null    int            // union: the null branch's index, -1 for none
}

// encField is one field of a record.
type encField struct {
	name string
	enc  *fastEncoder
	// A field missing from the JSON: with no default, the JSON does not
	// fit; with one, def is its binary (hasDef), or, a default the fast
	// path could not write beforehand, the output is encoded the general
	// way (defUnknown).
	def        []byte
	hasDef     bool
	defUnknown bool
}

// compileFastEncoder returns s's fast encoder, or nil when s has a type it
// does not write; seen breaks recursion (a recursive record has none).
func compileFastEncoder(s avro.Schema, seen map[string]bool) *fastEncoder {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		return nil
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		return &fastEncoder{kind: avro.Null}
	case *avro.PrimitiveSchema:
		switch t := s.Type(); t {
		case avro.Boolean, avro.Int, avro.Long, avro.Double, avro.String:
			return &fastEncoder{kind: t}
		}
	case *avro.EnumSchema:
		return &fastEncoder{kind: avro.Enum, symbols: s.Symbols()}
	case *avro.ArraySchema:
		if it := compileFastEncoder(s.Items(), seen); it != nil {
			return &fastEncoder{kind: avro.Array, items: it}
		}
	case *avro.UnionSchema:
		e := &fastEncoder{kind: avro.Union, null: -1}
		for i, t := range s.Types() {
			b := compileFastEncoder(t, seen)
			if b == nil {
				return nil
			}
			if b.kind == avro.Null && e.null < 0 {
				e.null = i
			}
			e.union = append(e.union, b)
			// The names spec.AvroFromJSON takes a branch by (branchName).
			name := string(derefSchema(t).Type())
			typ := name
			if n, ok := derefSchema(t).(avro.NamedSchema); ok {
				name = n.FullName()
			}
			e.names = append(e.names, [2]string{name, typ})
		}
		return e
	case *avro.RecordSchema:
		if seen[s.FullName()] {
			return nil
		}
		seen[s.FullName()] = true
		defer delete(seen, s.FullName())
		e := &fastEncoder{kind: avro.Record}
		for _, f := range s.Fields() {
			fe := compileFastEncoder(f.Type(), seen)
			if fe == nil {
				return nil
			}
			ef := encField{name: f.Name(), enc: fe}
			if f.HasDefault() {
				ef.def, ef.hasDef, ef.defUnknown = encodeDefault(f)
			}
			e.fields = append(e.fields, ef)
		}
		return e
	}
	return nil
}

func derefSchema(s avro.Schema) avro.Schema {
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema()
	}
	return s
}

// encodeDefault returns the binary hamba/avro writes for field f's default
// when a record given as a map lacks the field (its recordMapEncoder): a
// null default of a field that is not a union writes nothing, a union's
// default is its first branch's. unknown is true when that does not
// encode here: such a field missing is left to the general path.
func encodeDefault(f *avro.Field) (def []byte, ok, unknown bool) {
	v := f.Default()
	if u, isUnion := derefSchema(f.Type()).(*avro.UnionSchema); isUnion {
		v = map[string]any{string(u.Types()[0].Type()): v}
	} else if v == nil {
		return nil, true, false
	}
	b, err := avro.Marshal(f.Type(), v)
	if err != nil {
		return nil, false, true
	}
	return b, true, false
}

// encStatus is how a value of the JSON fits a schema: it does (its binary
// written), it surely does not (the general path refuses it: a union then
// tries its next branch), or the fast path cannot tell (the whole output
// goes the general way).
type encStatus int8

const (
	encOK encStatus = iota
	encMismatch
	encDecline
)

// encState is one output being encoded: the JSON read by the Scanner, the
// binary appended to out.
type encState struct {
	jsonscan.Scanner
	out []byte
}

// encode appends the Avro binary of the JSON document in to dst; false
// (dst's new bytes meaningless) when the fast path does not take it (see
// fastEncoder).
func (e *fastEncoder) encode(st *encState, dst, in []byte) ([]byte, bool) {
	st.In, st.Pos, st.out = in, 0, dst
	s := e.value(st, 0)
	st.WS()
	// What follows the value must be only whitespace (spec.DecodeJSON
	// refuses more values, and takes a stray ']' or '}': the general path
	// decides those).
	return st.out, s == encOK && st.Pos == len(st.In)
}

func appendLong(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}

func (e *fastEncoder) value(st *encState, depth int) encStatus {
	if depth > maxDepth {
		return encDecline
	}
	c := st.Peek()
	switch e.kind {
	case avro.Null:
		if c != 'n' {
			return st.other(c)
		}
		if !st.Literal("null") {
			return encDecline
		}
		return encOK
	case avro.Boolean:
		switch c {
		case 't':
			if !st.Literal("true") {
				return encDecline
			}
			st.out = append(st.out, 1)
			return encOK
		case 'f':
			if !st.Literal("false") {
				return encDecline
			}
			st.out = append(st.out, 0)
			return encOK
		}
		return st.other(c)
	case avro.Int, avro.Long:
		if c != '-' && (c < '0' || c > '9') {
			return st.other(c)
		}
		n, whole, ok := st.Integer()
		if !ok {
			return encDecline
		}
		if !whole {
			return encMismatch
		}
		if e.kind == avro.Int && (n < math.MinInt32 || n > math.MaxInt32) {
			return encMismatch
		}
		st.out = appendLong(st.out, n)
		return encOK
	case avro.Double:
		if c == '"' {
			// "NaN", "Infinity" and "-Infinity" are doubles too, as
			// math.NaN() and math.Inf write them; no other string is.
			k, ok := st.ReadString()
			if !ok {
				return encDecline
			}
			var f float64
			switch string(k) {
			case "NaN":
				f = math.NaN()
			case "Infinity":
				f = math.Inf(1)
			case "-Infinity":
				f = math.Inf(-1)
			default:
				return encMismatch
			}
			st.out = binary.LittleEndian.AppendUint64(st.out, math.Float64bits(f))
			return encOK
		}
		if c != '-' && (c < '0' || c > '9') {
			return st.other(c)
		}
		f, ok := st.Double()
		if !ok {
			return encDecline
		}
		st.out = binary.LittleEndian.AppendUint64(st.out, math.Float64bits(f))
		return encOK
	case avro.String:
		if c != '"' {
			return st.other(c)
		}
		return st.string()
	case avro.Enum:
		if c != '"' {
			return st.other(c)
		}
		k, ok := st.ReadString()
		if !ok {
			return encDecline
		}
		for i, sym := range e.symbols {
			if sym == string(k) {
				st.out = appendLong(st.out, int64(i))
				return encOK
			}
		}
		return encMismatch
	case avro.Array:
		if c != '[' {
			return st.other(c)
		}
		return e.array(st, depth)
	case avro.Record:
		if c != '{' {
			return st.other(c)
		}
		return e.record(st, depth)
	case avro.Union:
		return e.unionValue(st, c, depth)
	}
	return encDecline
}

// other is the status of a value that is not of the kind a schema wants:
// a mismatch when it starts a JSON value (the rest is checked by whatever
// takes it, or by the general path), else the fast path cannot tell.
func (st *encState) other(c byte) encStatus {
	switch {
	case c == '{', c == '[', c == '"', c == 't', c == 'f', c == 'n', c == '-', c >= '0' && c <= '9':
		return encMismatch
	}
	return encDecline
}

// string writes the JSON string at st.Pos as an Avro string.
func (st *encState) string() encStatus {
	if n := st.Plain(); n >= 0 {
		st.out = appendLong(st.out, int64(n))
		st.out = append(st.out, st.In[st.Pos+1:st.Pos+1+n]...)
		st.Pos += n + 2
		return encOK
	}
	var ok bool
	if st.Key, ok = st.Unquote(st.Key[:0]); !ok {
		return encDecline
	}
	st.out = appendLong(st.out, int64(len(st.Key)))
	st.out = append(st.out, st.Key...)
	return encOK
}

// blockLength is hamba/avro's default block length: an array's items are
// written in blocks of this many.
const blockLength = 100

func (e *fastEncoder) array(st *encState, depth int) encStatus {
	st.Pos++ // '['
	if st.Peek() == ']' {
		st.Pos++
		st.out = append(st.out, 0)
		return encOK
	}
	block, n := len(st.out), 0
	for {
		if s := e.items.value(st, depth+1); s != encOK {
			return s
		}
		if n++; n == blockLength {
			st.closeBlock(block, n)
			block, n = len(st.out), 0
		}
		more, ok := st.Next(']')
		if !ok {
			return encDecline
		}
		if !more {
			break
		}
	}
	if n > 0 {
		st.closeBlock(block, n)
	}
	st.out = append(st.out, 0)
	return encOK
}

// closeBlock puts the header of the block of n items written from start
// before it, as hamba/avro writes it: the count negated and the block's
// size, or the count alone for a block of no bytes.
func (st *encState) closeBlock(start, n int) {
	var small [2 * binary.MaxVarintLen64]byte
	size := len(st.out) - start
	h := small[:0]
	if size > 0 {
		h = appendLong(appendLong(h, -int64(n)), int64(size))
	} else {
		h = appendLong(h, int64(n))
	}
	st.out = append(st.out, h...)
	copy(st.out[start+len(h):], st.out[start:start+size])
	copy(st.out[start:], h)
}

func (e *fastEncoder) record(st *encState, depth int) encStatus {
	st.Pos++ // '{'
	start := len(st.out)
	var small [16][2]int
	spans := small[:0]
	if len(e.fields) > len(small) {
		spans = make([][2]int, 0, len(e.fields))
	}
	for range e.fields {
		spans = append(spans, [2]int{-1, -1})
	}
	inOrder, next, mismatched := true, 0, false
	if st.Peek() == '}' {
		st.Pos++
	} else {
		for {
			k, ok := st.ReadString()
			if !ok {
				return encDecline
			}
			i := -1
			for j := range e.fields {
				if e.fields[j].name == string(k) {
					i = j
					break
				}
			}
			if i < 0 {
				return encMismatch // a key the record has no field for
			}
			if spans[i][0] >= 0 {
				return encDecline // given twice: encoding/json keeps the last
			}
			if !st.Colon() {
				return encDecline
			}
			from, a := st.Pos, len(st.out)
			switch s := e.fields[i].enc.value(st, depth+1); s {
			case encDecline:
				return s
			case encMismatch:
				// Surely so only if the key is not given again: read on.
				st.out, st.Pos = st.out[:a], from
				if !st.Skip(depth+1, maxDepth) {
					return encDecline
				}
				mismatched = true
			}
			spans[i] = [2]int{a, len(st.out)}
			if i != next {
				inOrder = false
			}
			next = i + 1
			more, ok := st.Next('}')
			if !ok {
				return encDecline
			}
			if !more {
				break
			}
		}
	}
	if mismatched {
		return encMismatch
	}
	unknown := false
	for i := range e.fields {
		if spans[i][0] < 0 {
			inOrder = false
			if !e.fields[i].hasDef && !e.fields[i].defUnknown {
				return encMismatch // missing and no default
			}
			unknown = unknown || e.fields[i].defUnknown
		}
	}
	if unknown {
		return encDecline
	}
	if inOrder {
		return encOK
	}
	// The fields were written in the JSON's order: write them again in
	// the schema's after them, and move that down.
	mid := len(st.out)
	for i := range e.fields {
		if sp := spans[i]; sp[0] >= 0 {
			st.out = append(st.out, st.out[sp[0]:sp[1]]...)
		} else {
			st.out = append(st.out, e.fields[i].def...)
		}
	}
	n := copy(st.out[start:], st.out[mid:])
	st.out = st.out[:start+n]
	return encOK
}

// unionValue takes a union's branch as spec.AvroFromJSON does: null for
// the null branch; else the first other branch (in the schema's order)
// the value fits; else, for {"<branch>": value}, that branch.
func (e *fastEncoder) unionValue(st *encState, c byte, depth int) encStatus {
	if c == 'n' {
		if e.null < 0 {
			return encMismatch
		}
		if !st.Literal("null") {
			return encDecline
		}
		st.out = appendLong(st.out, int64(e.null))
		return encOK
	}
	from, a := st.Pos, len(st.out)
	for i, b := range e.union {
		if b.kind == avro.Null {
			continue
		}
		st.out = appendLong(st.out, int64(i))
		switch s := b.value(st, depth+1); s {
		case encOK, encDecline:
			return s
		}
		st.out, st.Pos = st.out[:a], from
	}
	if c != '{' {
		return st.other(c)
	}
	st.Pos++
	switch st.Peek() {
	case '"':
	case '}':
		return encMismatch // {} fits no branch but a record's
	default:
		return encDecline
	}
	k, ok := st.ReadString()
	if !ok {
		return encDecline
	}
	i := -1
	for j, n := range e.names {
		if n[0] == string(k) || n[1] == string(k) {
			i = j
			break
		}
	}
	if i < 0 {
		return encMismatch
	}
	if !st.Colon() {
		return encDecline
	}
	st.out = appendLong(st.out, int64(i))
	vfrom := st.Pos
	s := e.union[i].value(st, depth+1)
	if s == encDecline {
		return s
	}
	if s == encMismatch {
		// Surely so only if the object has no other key.
		st.Pos = vfrom
		if !st.Skip(depth+1, maxDepth) {
			return encDecline
		}
	}
	if st.Peek() != '}' {
		return encDecline
	}
	st.Pos++
	return s
}
