// Package jsonscan reads JSON text in one pass, with no tree: the
// primitives the codec's fast encoder and spec's Avro output check are
// built of. Each reads at a Scanner's position and moves past what it
// read; it answers with plain values and an ok flag, and what a value
// that does not read means (decline, mismatch, not valid) is left to the
// caller. Strings are taken as encoding/json reads them: one it would
// change (invalid UTF-8, a lone surrogate) does not read.
package jsonscan

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner is one JSON text being read: In from Pos. Key is a scratch
// buffer ReadString unescapes a string with an escape into; it is kept
// from one text to the next, so a pooled Scanner allocates it once.
type Scanner struct {
	In  []byte
	Pos int
	Key []byte
}

// WS moves past whitespace.
func (s *Scanner) WS() {
	for s.Pos < len(s.In) {
		switch s.In[s.Pos] {
		case ' ', '\t', '\n', '\r':
			s.Pos++
		default:
			return
		}
	}
}

// Peek returns the next byte after whitespace, 0 at the end.
func (s *Scanner) Peek() byte {
	s.WS()
	if s.Pos >= len(s.In) {
		return 0
	}
	return s.In[s.Pos]
}

// Literal moves past word ("null", "true", "false") if the text at Pos is
// it; false, not moving, if not.
func (s *Scanner) Literal(word string) bool {
	if len(s.In)-s.Pos < len(word) || string(s.In[s.Pos:s.Pos+len(word)]) != word {
		return false
	}
	s.Pos += len(word)
	return true
}

// Number reads a JSON number's text; integral says it has neither a
// fraction nor an exponent. ok is false, not moving, when the text at Pos
// is not a JSON number.
func (s *Scanner) Number() (text []byte, integral, ok bool) {
	in, i := s.In, s.Pos
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
	s.Pos = i
	return in[start:i], integral, true
}

// ParseInt is strconv.ParseInt(text, 10, 64) for the text of a JSON
// integer (as Number reads it, integral): false when it is past int64.
func ParseInt(text []byte) (int64, bool) {
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

// Integer reads a number for an Avro int or long as spec.DecodeJSON and
// spec.AvroFromJSON take it: an integer as itself, any other number that
// is whole (1.0, 1e3) as its value. ok is false when there is no number
// or it does not parse (an integer past int64, a number past float64's
// range); whole is false for a number that parses but is not whole or is
// 2^63 or more in size.
func (s *Scanner) Integer() (n int64, whole, ok bool) {
	text, integral, ok := s.Number()
	if !ok {
		return 0, false, false
	}
	if integral {
		if n, ok := ParseInt(text); ok {
			return n, true, true
		}
		return 0, false, false
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		return 0, false, false
	}
	if f != math.Trunc(f) || math.Abs(f) >= 1<<63 {
		return 0, false, true
	}
	return int64(f), true, true
}

// Double reads a number for an Avro double as spec.DecodeJSON gives it:
// an integer that fits int64 converted from it, any other parsed as a
// float; false when there is no number or it is past float64's range.
func (s *Scanner) Double() (float64, bool) {
	text, integral, ok := s.Number()
	if !ok {
		return 0, false
	}
	if integral {
		if n, ok := ParseInt(text); ok {
			return float64(n), true
		}
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		return 0, false
	}
	return f, true
}

// Plain returns the length of the string at Pos (its opening quote) up to
// its closing quote when it has no escape and no byte encoding/json would
// change; -1 when it has one, or does not end. It does not move.
func (s *Scanner) Plain() int {
	in := s.In
	for i := s.Pos + 1; i < len(in); {
		for i+8 <= len(in) && !Special8(binary.LittleEndian.Uint64(in[i:])) {
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
			return i - s.Pos - 1
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

// Special8 reports whether one of the eight bytes of w is one a JSON
// string does not hold as itself in plain ASCII: below 0x20, from 0x80,
// '"' or '\\' ("determine if a word has a byte less than n" and "has a
// zero byte", Bit Twiddling Hacks; exact for whether any byte is).
func Special8(w uint64) bool {
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

// ReadString reads the JSON string after whitespace (an object's key, a
// string value) and moves past it: a slice of In when it has no escape,
// else unescaped into Key. It is valid until the next string read; false
// when there is no string there, or one encoding/json would change or
// that is not JSON.
func (s *Scanner) ReadString() ([]byte, bool) {
	if s.Peek() != '"' {
		return nil, false
	}
	if n := s.Plain(); n >= 0 {
		k := s.In[s.Pos+1 : s.Pos+1+n]
		s.Pos += n + 2
		return k, true
	}
	var ok bool
	s.Key, ok = s.Unquote(s.Key[:0])
	return s.Key, ok
}

// Unquote appends the JSON string at Pos unescaped to dst as encoding/json
// reads it, and moves past it; false (Pos where it was) for a string it
// would change (invalid UTF-8, a lone surrogate) or that is not JSON.
func (s *Scanner) Unquote(dst []byte) ([]byte, bool) {
	in := s.In
	i := s.Pos + 1
	for i < len(in) {
		c := in[i]
		switch {
		case c == '"':
			s.Pos = i + 1
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

// hex4 reads the four hex digits of a \u escape at in[i:].
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

// Colon moves past the ':' after whitespace that follows an object's key;
// false, moving past the whitespace only, when there is none.
func (s *Scanner) Colon() bool {
	if s.Peek() != ':' {
		return false
	}
	s.Pos++
	return true
}

// Next moves past what follows an item of an array or object, after
// whitespace: a ',' (more is true) or the closing byte end (more is
// false); ok is false, moving past the whitespace only, for anything
// else.
func (s *Scanner) Next(end byte) (more, ok bool) {
	switch s.Peek() {
	case ',':
		s.Pos++
		return true, true
	case end:
		s.Pos++
		return false, true
	}
	return false, false
}

// Skip moves past one JSON value (after whitespace), checking that it is
// JSON (strings as ReadString takes them); false when it is not, or when
// it nests deeper than maxDepth, depth being the value's own.
func (s *Scanner) Skip(depth, maxDepth int) bool {
	if depth > maxDepth {
		return false
	}
	switch c := s.Peek(); {
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		s.Pos++
		if s.Peek() == end {
			s.Pos++
			return true
		}
		for {
			if c == '{' {
				if _, ok := s.ReadString(); !ok || !s.Colon() {
					return false
				}
			}
			if !s.Skip(depth+1, maxDepth) {
				return false
			}
			if more, ok := s.Next(end); !more {
				return ok
			}
		}
	case c == '"':
		_, ok := s.ReadString()
		return ok
	case c == 't':
		return s.Literal("true")
	case c == 'f':
		return s.Literal("false")
	case c == 'n':
		return s.Literal("null")
	default:
		_, _, ok := s.Number()
		return ok
	}
}
