package codec

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

// reference is what the codec wrote before appendJSON: encoding/json with
// HTML not escaped, without the newline.
func reference(t testing.TB, v any) ([]byte, bool) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, false
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), true
}

// checkSame fails when appendJSON writes v other than encoding/json does;
// a tree it declines is fine (the codec falls back to encoding/json).
func checkSame(t *testing.T, v any) {
	t.Helper()
	got, ok := appendJSON([]byte("junk"), v)
	if !ok {
		return
	}
	want, wok := reference(t, v)
	if !wok {
		t.Fatalf("appendJSON(%#v) = %s, but encoding/json refuses it", v, got[4:])
	}
	if !bytes.Equal(got[4:], want) {
		t.Fatalf("appendJSON(%#v) = %s, encoding/json writes %s", v, got[4:], want)
	}
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	values := []any{
		nil, true, false, "", "plain", "quote\"", "back\\slash", "tab\t", "é", "<&>", "\u2028",
		int64(0), int64(math.MaxInt64), int64(math.MinInt64), int32(-7), 42,
		0.0, math.Copysign(0, -1), 1.5, -2.25, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 1.2345e-9, math.MaxFloat64, math.SmallestNonzeroFloat64,
		[]any{}, []any{int64(1), "a", nil, []any{false}},
		map[string]any{}, map[string]any{"b": int64(1), "a": "x", "c": map[string]any{"z": nil, "y": []any{1.5}}},
		map[string]any{"k\"": int64(1)}, map[string]any{"a": math.NaN()}, []any{math.Inf(1)},
		map[string]any{"a": []byte("not a JSON value appendJSON writes")},
	}
	for _, v := range values {
		checkSame(t, v)
	}
	// Declined: what appendJSON must leave to encoding/json.
	for _, v := range []any{"quote\"", "é", map[string]any{"a": math.NaN()}, []byte("x")} {
		if _, ok := appendJSON(nil, v); ok {
			t.Errorf("appendJSON(%#v) wrote it; it must fall back to encoding/json", v)
		}
	}
}

// FuzzAppendJSON: any JSON document, read as encoding/json reads it (and
// with its integral numbers as int64, as spec.AvroToJSON gives a long),
// is written by appendJSON exactly as encoding/json writes it.
func FuzzAppendJSON(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1.5,-0,1e-7,1e21,"x"],"c":{"d":null,"e":true}}`, `"\u0001"`, `[1e300,2.5e-300]`, `{"z":{},"y":[]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			return
		}
		checkSame(t, v)
		checkSame(t, integral(v))
	})
}

func integral(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<62 {
			return int64(x)
		}
	case []any:
		out := make([]any, len(x))
		for i, it := range x {
			out[i] = integral(it)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, it := range x {
			out[k] = integral(it)
		}
		return out
	}
	return v
}
