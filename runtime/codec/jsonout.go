package codec

import (
	"math"
	"slices"
	"strconv"
)

// appendJSON appends v, a tree of the JSON values spec.AvroToJSON returns,
// as encoding/json (HTML not escaped) writes it: objects' keys sorted, the
// same number forms. It reports false, having appended nothing that counts,
// for anything it does not write byte for byte as encoding/json does (a
// string needing an escape, a value of another Go type, a non-finite
// number): the caller encodes the tree with encoding/json instead.
func appendJSON(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		return strconv.AppendBool(b, x), true
	case string:
		return appendPlainString(b, x)
	case int64:
		return strconv.AppendInt(b, x, 10), true
	case int32:
		return strconv.AppendInt(b, int64(x), 10), true
	case int:
		return strconv.AppendInt(b, int64(x), 10), true
	case float64:
		return appendFloat(b, x)
	case []any:
		b = append(b, '[')
		for i, it := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendJSON(b, it); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		var small [16]string
		keys := small[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendPlainString(b, k); !ok {
				return b, false
			}
			b = append(b, ':')
			if b, ok = appendJSON(b, x[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

// appendPlainString appends s quoted when it needs no escape in JSON
// (printable ASCII other than '"' and '\\').
func appendPlainString(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// appendFloat writes f as encoding/json does a float64.
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}
