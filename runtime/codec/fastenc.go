package codec

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
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

// encState is one output being encoded: the JSON read from in at pos, the
// binary appended to out; key holds an escaped record key unescaped.
type encState struct {
	in  []byte
	pos int
	out []byte
	key []byte
}

// encode appends the Avro binary of the JSON document in to dst; false
// (dst's new bytes meaningless) when the fast path does not take it (see
// fastEncoder).
func (e *fastEncoder) encode(st *encState, dst, in []byte) ([]byte, bool) {
	st.in, st.pos, st.out = in, 0, dst
	s := e.value(st, 0)
	st.ws()
	// What follows the value must be only whitespace (spec.DecodeJSON
	// refuses more values, and takes a stray ']' or '}': the general path
	// decides those).
	return st.out, s == encOK && st.pos == len(st.in)
}

func (st *encState) ws() {
	for st.pos < len(st.in) {
		switch st.in[st.pos] {
		case ' ', '\t', '\n', '\r':
			st.pos++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace, 0 at the end.
func (st *encState) peek() byte {
	st.ws()
	if st.pos >= len(st.in) {
		return 0
	}
	return st.in[st.pos]
}

func appendLong(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}

func (e *fastEncoder) value(st *encState, depth int) encStatus {
	if depth > maxDepth {
		return encDecline
	}
	c := st.peek()
	switch e.kind {
	case avro.Null:
		if c != 'n' {
			return st.other(c)
		}
		return st.literal("null")
	case avro.Boolean:
		switch c {
		case 't':
			if s := st.literal("true"); s != encOK {
				return s
			}
			st.out = append(st.out, 1)
			return encOK
		case 'f':
			if s := st.literal("false"); s != encOK {
				return s
			}
			st.out = append(st.out, 0)
			return encOK
		}
		return st.other(c)
	case avro.Int, avro.Long:
		if c != '-' && (c < '0' || c > '9') {
			return st.other(c)
		}
		n, s := st.integer()
		if s != encOK {
			return s
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
			k, ok := st.readKey()
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
		f, s := st.double()
		if s != encOK {
			return s
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
		k, ok := st.readKey()
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

func (st *encState) literal(word string) encStatus {
	if len(st.in)-st.pos < len(word) || string(st.in[st.pos:st.pos+len(word)]) != word {
		return encDecline
	}
	st.pos += len(word)
	return encOK
}

// number reads a JSON number's text; integral says it has neither a
// fraction nor an exponent.
func (st *encState) number() (text []byte, integral, ok bool) {
	in, i := st.in, st.pos
	start := i
	if i < len(in) && in[i] == '-' {
		i++
	}
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case i < len(in) && in[i] >= '1' && in[i] <= '9':
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
		}
	default:
		return nil, false, false
	}
	integral = true
	if i < len(in) && in[i] == '.' {
		integral = false
		i++
		d := i
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
		}
		if i == d {
			return nil, false, false
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		integral = false
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		d := i
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
		}
		if i == d {
			return nil, false, false
		}
	}
	st.pos = i
	return in[start:i], integral, true
}

// parseInt is strconv.ParseInt(text, 10, 64) for a JSON integer's text.
func parseInt(text []byte) (int64, bool) {
	neg := text[0] == '-'
	digits := text
	if neg {
		digits = text[1:]
	}
	if len(digits) > 18 {
		n, err := strconv.ParseInt(string(text), 10, 64)
		return n, err == nil
	}
	var n int64
	for _, d := range digits {
		n = n*10 + int64(d-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// integer reads a number for an int or long as spec.DecodeJSON and
// spec.AvroFromJSON take it: an integer as itself, any other number that
// is whole (1.0, 1e3) as its value.
func (st *encState) integer() (int64, encStatus) {
	text, integral, ok := st.number()
	if !ok {
		return 0, encDecline
	}
	if integral {
		if n, ok := parseInt(text); ok {
			return n, encOK
		}
		return 0, encDecline
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		return 0, encDecline
	}
	if f != math.Trunc(f) || math.Abs(f) >= 1<<63 {
		return 0, encMismatch
	}
	return int64(f), encOK
}

// double reads a number for a double as spec.DecodeJSON gives it: an
// integer that fits int64 converted from it, any other parsed as float.
func (st *encState) double() (float64, encStatus) {
	text, integral, ok := st.number()
	if !ok {
		return 0, encDecline
	}
	if integral {
		if n, ok := parseInt(text); ok {
			return float64(n), encOK
		}
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		return 0, encDecline
	}
	return f, encOK
}

// plain returns the length of the string at st.pos (its opening quote)
// when it has no escape, up to its closing quote; -1 when it has one (or
// a byte the fast path does not take).
func (st *encState) plain() int {
	in := st.in
	for i := st.pos + 1; i < len(in); {
		for i+8 <= len(in) && !special8(binary.LittleEndian.Uint64(in[i:])) {
			i += 8
		}
		for i < len(in) && plainASCII[in[i]] {
			i++
		}
		if i >= len(in) {
			break
		}
		c := in[i]
		switch {
		case c == '"':
			return i - st.pos - 1
		case c == '\\' || c < 0x20:
			return -1
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 {
				return -1
			}
			i += size
		}
	}
	return -1
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special8 reports whether one of the eight bytes of w is one plainASCII
// does not hold: below 0x20, from 0x80, '"' or '\\' ("determine if a
// word has a byte less than n" and "has a zero byte", Bit Twiddling Hacks;
// exact for whether any byte is).
func special8(w uint64) bool {
	less := (w - ones*0x20) &^ w & highs
	quote, backslash := w^(ones*'"'), w^(ones*'\\')
	zero := (quote-ones)&^quote&highs | (backslash-ones)&^backslash&highs
	return less|w&highs|zero != 0
}

// plainASCII holds the bytes a JSON string holds as themselves: printable
// ASCII but '"' and '\\'.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// string writes the JSON string at st.pos as an Avro string.
func (st *encState) string() encStatus {
	if n := st.plain(); n >= 0 {
		st.out = appendLong(st.out, int64(n))
		st.out = append(st.out, st.in[st.pos+1:st.pos+1+n]...)
		st.pos += n + 2
		return encOK
	}
	var ok bool
	if st.key, ok = st.unquote(st.key[:0]); !ok {
		return encDecline
	}
	st.out = appendLong(st.out, int64(len(st.key)))
	st.out = append(st.out, st.key...)
	return encOK
}

// readKey reads the JSON string at st.pos: a slice of the input when it
// has no escape, else unescaped into st.key. It is valid until the next
// string read.
func (st *encState) readKey() ([]byte, bool) {
	if n := st.plain(); n >= 0 {
		k := st.in[st.pos+1 : st.pos+1+n]
		st.pos += n + 2
		return k, true
	}
	var ok bool
	st.key, ok = st.unquote(st.key[:0])
	return st.key, ok
}

// unquote appends the JSON string at st.pos unescaped to dst as
// encoding/json reads it, and moves past it; false for a string it would
// change (invalid UTF-8, a lone surrogate) or that is not JSON.
func (st *encState) unquote(dst []byte) ([]byte, bool) {
	in := st.in
	i := st.pos + 1
	for i < len(in) {
		c := in[i]
		switch {
		case c == '"':
			st.pos = i + 1
			return dst, true
		case c < 0x20:
			return dst, false
		case c == '\\':
			if i+1 >= len(in) {
				return dst, false
			}
			i += 2
			switch in[i-1] {
			case '"', '\\', '/':
				dst = append(dst, in[i-1])
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := hex4(in, i)
				if !ok {
					return dst, false
				}
				i += 4
				if utf16.IsSurrogate(r) {
					if i+1 >= len(in) || in[i] != '\\' || in[i+1] != 'u' {
						return dst, false
					}
					r2, ok := hex4(in, i+2)
					if !ok {
						return dst, false
					}
					if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
						return dst, false
					}
					i += 6
				}
				dst = utf8.AppendRune(dst, r)
			default:
				return dst, false
			}
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 {
				return dst, false
			}
			dst = append(dst, in[i:i+size]...)
			i += size
		}
	}
	return dst, false
}

func hex4(in []byte, i int) (rune, bool) {
	if len(in)-i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range in[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// skip moves past one JSON value, checking that it is JSON (as unquote
// checks strings); false when it is not, or nests deeper than maxDepth.
func (st *encState) skip(depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch c := st.peek(); {
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		st.pos++
		if st.peek() == end {
			st.pos++
			return true
		}
		for {
			if c == '{' {
				if st.peek() != '"' {
					return false
				}
				if _, ok := st.readKey(); !ok {
					return false
				}
				if st.peek() != ':' {
					return false
				}
				st.pos++
			}
			if !st.skip(depth + 1) {
				return false
			}
			switch st.peek() {
			case ',':
				st.pos++
			case end:
				st.pos++
				return true
			default:
				return false
			}
		}
	case c == '"':
		_, ok := st.readKey()
		return ok
	case c == 't':
		return st.literal("true") == encOK
	case c == 'f':
		return st.literal("false") == encOK
	case c == 'n':
		return st.literal("null") == encOK
	default:
		_, _, ok := st.number()
		return ok
	}
}

// blockLength is hamba/avro's default block length: an array's items are
// written in blocks of this many.
const blockLength = 100

func (e *fastEncoder) array(st *encState, depth int) encStatus {
	st.pos++ // '['
	if st.peek() == ']' {
		st.pos++
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
		switch st.peek() {
		case ',':
			st.pos++
			continue
		case ']':
			st.pos++
		default:
			return encDecline
		}
		break
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
	st.pos++ // '{'
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
	if st.peek() == '}' {
		st.pos++
	} else {
		for {
			if st.peek() != '"' {
				return encDecline
			}
			k, ok := st.readKey()
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
			if st.peek() != ':' {
				return encDecline
			}
			st.pos++
			from, a := st.pos, len(st.out)
			switch s := e.fields[i].enc.value(st, depth+1); s {
			case encDecline:
				return s
			case encMismatch:
				// Surely so only if the key is not given again: read on.
				st.out, st.pos = st.out[:a], from
				if !st.skip(depth + 1) {
					return encDecline
				}
				mismatched = true
			}
			spans[i] = [2]int{a, len(st.out)}
			if i != next {
				inOrder = false
			}
			next = i + 1
			switch st.peek() {
			case ',':
				st.pos++
				continue
			case '}':
				st.pos++
			default:
				return encDecline
			}
			break
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
		if s := st.literal("null"); s != encOK {
			return s
		}
		st.out = appendLong(st.out, int64(e.null))
		return encOK
	}
	from, a := st.pos, len(st.out)
	for i, b := range e.union {
		if b.kind == avro.Null {
			continue
		}
		st.out = appendLong(st.out, int64(i))
		switch s := b.value(st, depth+1); s {
		case encOK, encDecline:
			return s
		}
		st.out, st.pos = st.out[:a], from
	}
	if c != '{' {
		return st.other(c)
	}
	st.pos++
	switch st.peek() {
	case '"':
	case '}':
		return encMismatch // {} fits no branch but a record's
	default:
		return encDecline
	}
	k, ok := st.readKey()
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
	if st.peek() != ':' {
		return encDecline
	}
	st.pos++
	st.out = appendLong(st.out, int64(i))
	vfrom := st.pos
	s := e.union[i].value(st, depth+1)
	if s == encDecline {
		return s
	}
	if s == encMismatch {
		// Surely so only if the object has no other key.
		st.pos = vfrom
		if !st.skip(depth + 1) {
			return encDecline
		}
	}
	if st.peek() != '}' {
		return encDecline
	}
	st.pos++
	return s
}
