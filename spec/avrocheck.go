package spec

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
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

// checkState is one JSON document being checked, read from in at pos; key
// holds an escaped string unescaped.
type checkState struct {
	in  []byte
	pos int
	key []byte
}

// fits reports whether the JSON document body surely fits c: it is one
// JSON value (whitespace around it only) that AvroFromJSON takes. A nil
// check fits nothing.
func (c *avroCheck) fits(body []byte) bool {
	if c == nil {
		return false
	}
	st := checkState{in: body}
	if !c.value(&st, 0) {
		return false
	}
	st.ws()
	return st.pos == len(st.in)
}

func (st *checkState) ws() {
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
func (st *checkState) peek() byte {
	st.ws()
	if st.pos >= len(st.in) {
		return 0
	}
	return st.in[st.pos]
}

func (c *avroCheck) value(st *checkState, depth int) bool {
	if depth > checkMaxDepth {
		return false
	}
	ch := st.peek()
	switch c.kind {
	case checkNull:
		return ch == 'n' && st.literal("null")
	case checkBoolean:
		switch ch {
		case 't':
			return st.literal("true")
		case 'f':
			return st.literal("false")
		}
		return false
	case checkInt, checkLong:
		if ch != '-' && (ch < '0' || ch > '9') {
			return false
		}
		n, ok := st.integer()
		if !ok {
			return false
		}
		return c.kind == checkLong || n >= math.MinInt32 && n <= math.MaxInt32
	case checkFloat:
		if ch == '"' {
			// "NaN", "Infinity" and "-Infinity" are numbers too (float);
			// no other string is.
			k, ok := st.readString()
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
		return st.double()
	case checkString:
		if ch != '"' {
			return false
		}
		_, ok := st.readString()
		return ok
	case checkEnum:
		if ch != '"' {
			return false
		}
		k, ok := st.readString()
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

func (st *checkState) literal(word string) bool {
	if len(st.in)-st.pos < len(word) || string(st.in[st.pos:st.pos+len(word)]) != word {
		return false
	}
	st.pos += len(word)
	return true
}

// number reads a JSON number's text; integral says it has neither a
// fraction nor an exponent.
func (st *checkState) number() (text []byte, integral, ok bool) {
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

// checkParseInt is strconv.ParseInt(text, 10, 64) for a JSON integer's
// text.
func checkParseInt(text []byte) (int64, bool) {
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

// integer reads a number for an int or long as DecodeJSON and integer()
// take it: an integer that fits int64 as itself, any other number that
// parses and is whole (1.0, 1e3) and below 2^63 in size as its value.
func (st *checkState) integer() (int64, bool) {
	text, integral, ok := st.number()
	if !ok {
		return 0, false
	}
	if integral {
		if n, ok := checkParseInt(text); ok {
			return n, true
		}
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<63 {
		return 0, false
	}
	return int64(f), true
}

// double reports whether the number at st.pos is one DecodeJSON reads
// without a range error.
func (st *checkState) double() bool {
	text, integral, ok := st.number()
	if !ok {
		return false
	}
	if integral {
		if _, ok := checkParseInt(text); ok {
			return true
		}
	}
	_, err := strconv.ParseFloat(string(text), 64)
	return err == nil
}

// plain returns the length of the string at st.pos (its opening quote)
// when it has no escape, up to its closing quote; -1 when it has one (or
// a byte plain does not take).
func (st *checkState) plain() int {
	in := st.in
	for i := st.pos + 1; i < len(in); {
		for i+8 <= len(in) && !checkSpecial8(binary.LittleEndian.Uint64(in[i:])) {
			i += 8
		}
		for i < len(in) && checkPlainASCII[in[i]] {
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

// checkSpecial8 reports whether one of the eight bytes of w is one
// checkPlainASCII does not hold: below 0x20, from 0x80, '"' or '\\'
// ("determine if a word has a byte less than n" and "has a zero byte",
// Bit Twiddling Hacks; exact for whether any byte is).
func checkSpecial8(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	less := (w - ones*0x20) &^ w & highs
	quote, backslash := w^(ones*'"'), w^(ones*'\\')
	zero := (quote-ones)&^quote&highs | (backslash-ones)&^backslash&highs
	return less|w&highs|zero != 0
}

// checkPlainASCII holds the bytes a JSON string holds as themselves:
// printable ASCII but '"' and '\\'.
var checkPlainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// readString reads the JSON string at st.pos: a slice of the input when
// it has no escape, else unescaped into st.key. It is valid until the
// next string read; false for a string encoding/json would change
// (invalid UTF-8, a lone surrogate) or that is not JSON.
func (st *checkState) readString() ([]byte, bool) {
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
// encoding/json reads it, and moves past it.
func (st *checkState) unquote(dst []byte) ([]byte, bool) {
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
				r, ok := checkHex4(in, i)
				if !ok {
					return dst, false
				}
				i += 4
				if utf16.IsSurrogate(r) {
					if i+1 >= len(in) || in[i] != '\\' || in[i+1] != 'u' {
						return dst, false
					}
					r2, ok := checkHex4(in, i+2)
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

func checkHex4(in []byte, i int) (rune, bool) {
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

func (c *avroCheck) array(st *checkState, depth int) bool {
	st.pos++ // '['
	if st.peek() == ']' {
		st.pos++
		return true
	}
	for {
		if !c.items.value(st, depth+1) {
			return false
		}
		switch st.peek() {
		case ',':
			st.pos++
		case ']':
			st.pos++
			return true
		default:
			return false
		}
	}
}

// mapValue checks an Avro map: every value fits (a key given twice is
// then no matter: whichever encoding/json keeps fits).
func (c *avroCheck) mapValue(st *checkState, depth int) bool {
	st.pos++ // '{'
	if st.peek() == '}' {
		st.pos++
		return true
	}
	for {
		if st.peek() != '"' {
			return false
		}
		if _, ok := st.readString(); !ok {
			return false
		}
		if st.peek() != ':' {
			return false
		}
		st.pos++
		if !c.items.value(st, depth+1) {
			return false
		}
		switch st.peek() {
		case ',':
			st.pos++
		case '}':
			st.pos++
			return true
		default:
			return false
		}
	}
}

func (c *avroCheck) record(st *checkState, depth int) bool {
	st.pos++ // '{'
	var small [64]bool
	seen := small[:0]
	if len(c.fields) <= len(small) {
		seen = small[:len(c.fields)]
	} else {
		seen = make([]bool, len(c.fields))
	}
	if st.peek() == '}' {
		st.pos++
	} else {
		for {
			if st.peek() != '"' {
				return false
			}
			k, ok := st.readString()
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
			if st.peek() != ':' {
				return false
			}
			st.pos++
			if !c.fields[i].check.value(st, depth+1) {
				return false
			}
			switch st.peek() {
			case ',':
				st.pos++
				continue
			case '}':
				st.pos++
			default:
				return false
			}
			break
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
func (c *avroCheck) unionValue(st *checkState, ch byte, depth int) bool {
	if ch == 'n' {
		return c.null && st.literal("null")
	}
	from := st.pos
	for _, b := range c.union {
		if b.kind == checkNull {
			continue
		}
		if b.value(st, depth+1) {
			return true
		}
		st.pos = from
	}
	if ch != '{' {
		return false
	}
	st.pos++
	if st.peek() != '"' {
		return false
	}
	k, ok := st.readString()
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
	if i < 0 || st.peek() != ':' {
		return false
	}
	st.pos++
	if !c.union[i].value(st, depth+1) {
		return false
	}
	// The object must have that one key only.
	if st.peek() != '}' {
		return false
	}
	st.pos++
	return true
}
