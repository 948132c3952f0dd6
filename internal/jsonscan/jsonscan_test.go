package jsonscan

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
)

func TestLiteral(t *testing.T) {
	for _, tc := range []struct {
		in, word string
		ok       bool
		pos      int
	}{
		{`null`, "null", true, 4},
		{`nul`, "null", false, 0},
		{`true,`, "true", true, 4},
		{`trUe`, "true", false, 0},
		{`false`, "false", true, 5},
	} {
		s := Scanner{In: []byte(tc.in)}
		if ok := s.Literal(tc.word); ok != tc.ok || s.Pos != tc.pos {
			t.Errorf("Literal(%q) on %q = %v at %d, want %v at %d", tc.word, tc.in, ok, s.Pos, tc.ok, tc.pos)
		}
	}
}

func TestPeekSkipsWhitespace(t *testing.T) {
	s := Scanner{In: []byte(" \t\r\n x")}
	if c := s.Peek(); c != 'x' || s.Pos != 5 {
		t.Fatalf("Peek = %q at %d, want 'x' at 5", c, s.Pos)
	}
	s = Scanner{In: []byte("  ")}
	if c := s.Peek(); c != 0 || s.Pos != 2 {
		t.Fatalf("Peek at the end = %q at %d, want 0 at 2", c, s.Pos)
	}
}

func TestNumber(t *testing.T) {
	for _, tc := range []struct {
		in       string
		text     string // "" when it does not read
		integral bool
	}{
		{`0`, `0`, true},
		{`-0`, `-0`, true},
		{`123,`, `123`, true},
		{`01`, `0`, true}, // the number is 0; what follows is the caller's
		{`-`, ``, false},
		{`1.`, ``, false},
		{`1.5`, `1.5`, false},
		{`1e`, ``, false},
		{`1e+`, ``, false},
		{`1E-7]`, `1E-7`, false},
		{`2.5e3`, `2.5e3`, false},
		{`.5`, ``, false},
		{`+1`, ``, false},
		{`x`, ``, false},
	} {
		s := Scanner{In: []byte(tc.in)}
		text, integral, ok := s.Number()
		if ok != (tc.text != "") || string(text) != tc.text || ok && integral != tc.integral {
			t.Errorf("Number(%q) = %q, %v, %v; want %q, %v", tc.in, text, integral, ok, tc.text, tc.integral)
		}
		if want := len(tc.text); s.Pos != want {
			t.Errorf("Number(%q) left Pos at %d, want %d", tc.in, s.Pos, want)
		}
	}
}

func TestParseInt(t *testing.T) {
	for _, tc := range []struct {
		text string
		n    int64
		ok   bool
	}{
		{"0", 0, true},
		{"-42", -42, true},
		{"999999999999999999", 999999999999999999, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"-9223372036854775808", -9223372036854775808, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false},
		{"123456789012345678901234567890", 0, false},
	} {
		n, ok := ParseInt([]byte(tc.text))
		if ok != tc.ok || ok && n != tc.n {
			t.Errorf("ParseInt(%s) = %d, %v; want %d, %v", tc.text, n, ok, tc.n, tc.ok)
		}
	}
}

func TestIntegerAndDouble(t *testing.T) {
	for _, tc := range []struct {
		in        string
		n         int64
		whole, ok bool
		f         float64
		fok       bool
	}{
		{`7`, 7, true, true, 7, true},
		{`-3`, -3, true, true, -3, true},
		{`1.0`, 1, true, true, 1, true},
		{`1e3`, 1000, true, true, 1000, true},
		{`1.5`, 0, false, true, 1.5, true},
		{`9223372036854775807`, 9223372036854775807, true, true, 9223372036854775807, true},
		{`9223372036854775808`, 0, false, false, 9223372036854775808, true},          // past int64: a double only
		{`9.3e18`, 0, false, true, 9.3e18, true},                                     // whole, but 2^63 or more
		{`-9.223372036854775808e18`, 0, false, true, -9.223372036854775808e18, true}, // -2^63 is 2^63 in size
		{`1e400`, 0, false, false, 0, false},                                         // past float64's range
		{`-`, 0, false, false, 0, false},
	} {
		s := Scanner{In: []byte(tc.in)}
		n, whole, ok := s.Integer()
		if ok != tc.ok || whole != tc.whole || n != tc.n {
			t.Errorf("Integer(%s) = %d, whole %v, ok %v; want %d, %v, %v", tc.in, n, whole, ok, tc.n, tc.whole, tc.ok)
		}
		s = Scanner{In: []byte(tc.in)}
		f, ok := s.Double()
		if ok != tc.fok || f != tc.f {
			t.Errorf("Double(%s) = %g, %v; want %g, %v", tc.in, f, ok, tc.f, tc.fok)
		}
	}
}

// TestReadString checks escapes and surrogates against encoding/json:
// a string reads when encoding/json takes it without change, as the same
// bytes.
func TestReadString(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{`"plain"`, "plain", true},
		{`""`, "", true},
		{`"h\u00e9llo"`, "h\u00e9llo", true},
		{`"h\u00E9"`, "h\u00e9", true},
		{`"é"`, "é", true},
		{`"\"\\\/\b\f\n\r\t"`, "\"\\/\b\f\n\r\t", true},
		{`"\ud83d\ude00"`, "\U0001F600", true}, // a surrogate pair
		{`"\ud83d"`, "", false},                // a lone high surrogate
		{`"\ude00"`, "", false},                // a lone low surrogate
		{`"\ud83d\u0041"`, "", false},          // a high surrogate and no low one
		{`"\ud83dx"`, "", false},               // a high surrogate and no escape after it
		{`"\u12"`, "", false},                  // too few hex digits
		{`"\u12g4"`, "", false},                // not hex
		{`"\x"`, "", false},                    // no such escape
		{`"a` + "\n" + `"`, "", false},         // a control byte
		{`"a` + "\xff" + `"`, "", false},       // invalid UTF-8
		{`"a\n` + "\xff" + `"`, "", false},     // invalid UTF-8 after an escape
		{`"unterminated`, "", false},           // no closing quote
		{`"esc\`, "", false},                   // ends inside an escape
		{`"\u0000"`, "\x00", true},             // NUL escaped
		{`"\u2028 and \u2029"`, "\u2028 and \u2029", true},
	} {
		s := Scanner{In: []byte(tc.in + " ,")}
		got, ok := s.ReadString()
		if ok != tc.ok || ok && string(got) != tc.want {
			t.Errorf("ReadString(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if ok && s.Pos != len(tc.in) {
			t.Errorf("ReadString(%q) left Pos at %d, want %d", tc.in, s.Pos, len(tc.in))
		}
		var v string
		err := json.Unmarshal([]byte(tc.in), &v)
		// encoding/json replaces what ReadString refuses (U+FFFD for a
		// lone surrogate, invalid UTF-8) or refuses it; it never takes
		// a refused string as its own bytes.
		if tc.ok && (err != nil || v != tc.want) {
			t.Errorf("ReadString(%q) = %q, but encoding/json reads %q, %v", tc.in, got, v, err)
		}
		if !tc.ok && err == nil && v == strings.Trim(tc.in, `"`) {
			t.Errorf("ReadString(%q) refuses a string encoding/json takes as itself", tc.in)
		}
	}
}

// TestPlain checks the plain-run detection, eight bytes at a time, with
// the byte that ends the run at every position around the boundaries.
func TestPlain(t *testing.T) {
	for n := range 20 {
		body := strings.Repeat("a", n)
		s := Scanner{In: []byte(`"` + body + `"`)}
		if got := s.Plain(); got != n {
			t.Errorf("Plain(%q) = %d, want %d", s.In, got, n)
		}
		for _, stop := range []string{`\n`, "\x01", "\x1f"} {
			s := Scanner{In: []byte(`"` + body + stop + `x"`)}
			if got := s.Plain(); got != -1 {
				t.Errorf("Plain(%q) = %d, want -1 (it needs unescaping)", s.In, got)
			}
		}
		s = Scanner{In: []byte(`"` + body + "é\u2028" + `"`)}
		if got, want := s.Plain(), n+len("é\u2028"); got != want {
			t.Errorf("Plain(%q) = %d, want %d (valid UTF-8 is plain)", s.In, got, want)
		}
		s = Scanner{In: []byte(`"` + body + "\xc3" + `"`)}
		if got := s.Plain(); got != -1 {
			t.Errorf("Plain(%q) = %d, want -1 (invalid UTF-8)", s.In, got)
		}
		s = Scanner{In: []byte(`"` + body)}
		if got := s.Plain(); got != -1 {
			t.Errorf("Plain(%q) = %d, want -1 (no closing quote)", s.In, got)
		}
		s = Scanner{In: []byte(`xx"` + body + `"`), Pos: 2}
		if got := s.Plain(); got != n {
			t.Errorf("Plain(%q) from 2 = %d, want %d", s.In, got, n)
		}
	}
}

func TestSpecial8(t *testing.T) {
	for c := range 256 {
		for pos := range 8 {
			b := []byte("abcdefgh")
			b[pos] = byte(c)
			want := !plainASCII[c]
			if got := Special8(binary.LittleEndian.Uint64(b)); got != want {
				t.Fatalf("Special8(%q) = %v, want %v", b, got, want)
			}
		}
	}
}

func TestSkip(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{}`, true},
		{`[]`, true},
		{` { "a" : [1, -2.5e3, "x\n", true, false, null], "b": {} } `, true},
		{`[1,]`, false},
		{`{"a"}`, false},
		{`{"a":1,}`, false},
		{`{1:2}`, false},
		{`["\ud800"]`, false},
		{`[nul]`, false},
		{`[1 2]`, false},
		{`[`, false},
		{`-`, false},
	} {
		s := Scanner{In: []byte(tc.in)}
		ok := s.Skip(0, 64)
		if ok != tc.ok {
			t.Errorf("Skip(%q) = %v, want %v", tc.in, ok, tc.ok)
		}
		if ok && strings.TrimSpace(tc.in[s.Pos:]) != "" {
			t.Errorf("Skip(%q) stopped at %d, before the value's end", tc.in, s.Pos)
		}
	}
}

func TestSkipDepth(t *testing.T) {
	const maxDepth = 4
	// depth 0 is the outer value: maxDepth+1 levels of arrays nest as
	// deep as allowed, one more is too deep.
	for levels, want := range map[int]bool{maxDepth + 1: true, maxDepth + 2: false} {
		in := strings.Repeat("[", levels) + strings.Repeat("]", levels)
		s := Scanner{In: []byte(in)}
		if ok := s.Skip(0, maxDepth); ok != want {
			t.Errorf("Skip(%s, max %d) = %v, want %v", in, maxDepth, ok, want)
		}
		in = strings.Repeat(`{"k":`, levels-1) + `1` + strings.Repeat("}", levels-1)
		s = Scanner{In: []byte(in)}
		if ok := s.Skip(0, maxDepth); ok != (levels-1 <= maxDepth) {
			t.Errorf("Skip(%s, max %d) = %v, want %v", in, maxDepth, ok, levels-1 <= maxDepth)
		}
	}
	if s := (Scanner{In: []byte("1")}); s.Skip(5, 4) {
		t.Error("Skip of a value at depth 5 with maxDepth 4 = true, want false")
	}
}

func TestReadStringColonNext(t *testing.T) {
	s := Scanner{In: []byte(` "k\n" : 1 , 2 ] x`)}
	if k, ok := s.ReadString(); !ok || string(k) != "k\n" {
		t.Fatalf("ReadString = %q, %v; want \"k\\n\", true", k, ok)
	}
	if !s.Colon() {
		t.Fatalf("Colon at %d of %q = false, want true", s.Pos, s.In)
	}
	s.WS()
	if _, _, ok := s.Number(); !ok {
		t.Fatalf("Number after the colon does not read")
	}
	if more, ok := s.Next(']'); !more || !ok {
		t.Fatalf("Next at ',' = %v, %v; want true, true", more, ok)
	}
	s.WS()
	s.Pos++ // '2'
	if more, ok := s.Next(']'); more || !ok {
		t.Fatalf("Next at ']' = %v, %v; want false, true", more, ok)
	}
	s.WS()
	at := s.Pos
	if more, ok := s.Next(']'); more || ok || s.Pos != at {
		t.Fatalf("Next at 'x' = %v, %v, moved to %d; want false, false, not moving past 'x'", more, ok, s.Pos)
	}
	if s.Colon() || s.Pos != at {
		t.Fatalf("Colon at 'x' = true or moved; want false, not moving past 'x'")
	}
	if _, ok := s.ReadString(); ok {
		t.Fatalf("ReadString at 'x' = true, want false")
	}
}
