package spec

import (
	"encoding/base64"
	"fmt"
	"maps"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hamba/avro/v2"
)

// The JSON a handler sees for an Avro payload, and writes for an Avro
// output (FLOW-FORMAT §6: handlers always see JSON). AvroToJSON and
// AvroFromJSON follow it; the schemas README documents it for users.
//
//	null, boolean, string        as themselves
//	int, long                    a JSON integer (a long beyond 2^53 is exact in the text)
//	float, double                a JSON number; NaN, Infinity, -Infinity as those strings
//	bytes, fixed                 a base64 string (standard alphabet, padded)
//	enum                         the symbol, a string
//	array, map, record           an array, an object, an object of the record's fields
//	union                        the value of its branch, unwrapped; null for null. Written,
//	                             the first branch (in the schema's order) the value fits is
//	                             taken; {"<branch>": value} (Avro's JSON encoding) picks one
//	date                         "2006-01-02"
//	time-millis, time-micros     "15:04:05.000", "15:04:05.000000"
//	timestamp-millis, -micros    RFC 3339 in UTC: "2006-01-02T15:04:05.000Z", ".000000Z"
//	local-timestamp-millis, -micros  the same without the zone
//
// A date or time that the text cannot hold (a year past 0 to 9999, a time
// of day below 0 or from 24 hours) is the number Avro holds: days, or
// milliseconds or microseconds (since the epoch, or since midnight);
// written, these numbers are taken as well as the text.
//
//	decimal                      a string with exactly scale digits after the point, "12.30";
//	                             written, a string or a JSON number (rounded to the scale)
//	uuid                         a string
//	duration                     {"months": n, "days": n, "milliseconds": n}
//
// A record's field missing from the JSON takes its default and is an error
// without one; a key the record has no field for is an error, never
// dropped.
const (
	dateLayout   = "2006-01-02"
	millisLayout = "2006-01-02T15:04:05.000Z07:00"
	microsLayout = "2006-01-02T15:04:05.000000Z07:00"
	localMillis  = "2006-01-02T15:04:05.000"
	localMicros  = "2006-01-02T15:04:05.000000"
)

// AvroJSONError says where a value does not fit an Avro schema: At is a
// JSON Pointer into the payload ("/lines/0/sku"; "" for the whole).
type AvroJSONError struct {
	At  string
	Msg string
}

// Error names the location and what is wrong there.
func (e *AvroJSONError) Error() string {
	at := e.At
	if at == "" {
		at = "/"
	}
	return fmt.Sprintf("at %s: %s", at, e.Msg)
}

func jsonErr(at, format string, args ...any) error {
	return &AvroJSONError{At: at, Msg: fmt.Sprintf(format, args...)}
}

// validateAvro checks a decoded JSON payload against an Avro type by the
// mapping above.
func (t *Type) validateAvro(payload any) error {
	if t.Avro.Schema == nil {
		return nil
	}
	if _, err := AvroFromJSON(t.Avro.Schema, payload); err != nil {
		return fmt.Errorf("payload does not match type %s %v", t.Name, err)
	}
	return nil
}

// AvroFromJSON converts a decoded JSON value (as DecodeJSON returns it) to
// the Go values hamba/avro's generic encoder writes for schema s. The error
// is an *AvroJSONError.
func AvroFromJSON(s avro.Schema, v any) (any, error) { return fromJSON(s, v, "") }

func deref(s avro.Schema) avro.Schema {
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema()
	}
	return s
}

func logicalOf(s avro.Schema) avro.LogicalSchema {
	if l, ok := s.(avro.LogicalTypeSchema); ok {
		return l.Logical()
	}
	return nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case int64, float64, int:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func fromJSON(s avro.Schema, v any, at string) (any, error) {
	s = deref(s)
	if l := logicalOf(s); l != nil {
		if out, err, done := logicalFromJSON(s, l, v, at); done {
			return out, err
		}
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		if v != nil {
			return nil, jsonErr(at, "want null, got %s", jsonKind(v))
		}
		return nil, nil
	case *avro.PrimitiveSchema:
		return primitiveFromJSON(s.Type(), v, at)
	case *avro.EnumSchema:
		str, ok := v.(string)
		if !ok {
			return nil, jsonErr(at, "want one of the symbols of enum %s, got %s", s.FullName(), jsonKind(v))
		}
		for _, sym := range s.Symbols() {
			if sym == str {
				return str, nil
			}
		}
		return nil, jsonErr(at, "%q is not a symbol of enum %s (%s)", str, s.FullName(), strings.Join(s.Symbols(), ", "))
	case *avro.FixedSchema:
		b, err := bytesFromJSON(v, at)
		if err != nil {
			return nil, err
		}
		if len(b) != s.Size() {
			return nil, jsonErr(at, "fixed %s holds %d bytes, got %d", s.FullName(), s.Size(), len(b))
		}
		arr := reflect.New(reflect.ArrayOf(s.Size(), reflect.TypeFor[byte]())).Elem()
		reflect.Copy(arr, reflect.ValueOf(b))
		return arr.Interface(), nil
	case *avro.ArraySchema:
		items, ok := v.([]any)
		if !ok {
			return nil, jsonErr(at, "want an array, got %s", jsonKind(v))
		}
		out := make([]any, len(items))
		for i, it := range items {
			x, err := fromJSON(s.Items(), it, at+"/"+strconv.Itoa(i))
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	case *avro.MapSchema:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, jsonErr(at, "want an object (an Avro map), got %s", jsonKind(v))
		}
		out := make(map[string]any, len(m))
		// In key order, so that of two values that do not fit the error
		// names the same one every time.
		for _, k := range slices.Sorted(maps.Keys(m)) {
			x := m[k]
			y, err := fromJSON(s.Values(), x, at+"/"+pointerEscape(k))
			if err != nil {
				return nil, err
			}
			out[k] = y
		}
		return out, nil
	case *avro.RecordSchema:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, jsonErr(at, "want an object (record %s), got %s", s.FullName(), jsonKind(v))
		}
		out := make(map[string]any, len(s.Fields()))
		for _, f := range s.Fields() {
			x, ok := m[f.Name()]
			if !ok {
				if !f.HasDefault() {
					return nil, jsonErr(at, "field %q of record %s is missing and has no default", f.Name(), s.FullName())
				}
				continue // the encoder writes the field's default
			}
			y, err := fromJSON(f.Type(), x, at+"/"+pointerEscape(f.Name()))
			if err != nil {
				return nil, err
			}
			out[f.Name()] = y
		}
		if len(m) > len(out) {
			for _, k := range slices.Sorted(maps.Keys(m)) { // the first unknown key, every time
				if !hasField(s, k) {
					return nil, jsonErr(at+"/"+pointerEscape(k), "record %s has no field %q (its fields: %s)", s.FullName(), k, avroFieldList(s))
				}
			}
		}
		return out, nil
	case *avro.UnionSchema:
		return unionFromJSON(s, v, at)
	}
	return nil, jsonErr(at, "schema type %s is not supported", s.Type())
}

func hasField(r *avro.RecordSchema, name string) bool {
	for _, f := range r.Fields() {
		if f.Name() == name {
			return true
		}
	}
	return false
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// branchName is how hamba/avro names a union branch: a named type's full
// name, else the type and its logical type ("long.timestamp-millis").
func branchName(s avro.Schema) string {
	s = deref(s)
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	name := string(s.Type())
	if l := logicalOf(s); l != nil {
		name += "." + string(l.Type())
	}
	return name
}

func unionFromJSON(u *avro.UnionSchema, v any, at string) (any, error) {
	types := u.Types()
	if v == nil {
		for _, t := range types {
			if t.Type() == avro.Null {
				return nil, nil
			}
		}
		return nil, jsonErr(at, "null is not one of the union's branches (%s)", unionNames(u))
	}
	for _, t := range types {
		if t.Type() == avro.Null {
			continue
		}
		if x, err := fromJSON(t, v, at); err == nil {
			return map[string]any{branchName(t): x}, nil
		}
	}
	// Avro's JSON encoding of a union: {"<branch>": value}.
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for k, x := range m {
			for _, t := range types {
				if branchName(t) == k || string(deref(t).Type()) == k {
					y, err := fromJSON(t, x, at+"/"+pointerEscape(k))
					if err != nil {
						return nil, err
					}
					return map[string]any{branchName(t): y}, nil
				}
			}
		}
	}
	return nil, jsonErr(at, "%s fits none of the union's branches (%s)", jsonKind(v), unionNames(u))
}

func unionNames(u *avro.UnionSchema) string {
	names := make([]string, len(u.Types()))
	for i, t := range u.Types() {
		names[i] = branchName(t)
	}
	return strings.Join(names, ", ")
}

func integer(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return int64(x), true
		}
	}
	return 0, false
}

func float(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case float64:
		return x, true
	case string:
		switch x {
		case "NaN":
			return math.NaN(), true
		case "Infinity":
			return math.Inf(1), true
		case "-Infinity":
			return math.Inf(-1), true
		}
	}
	return 0, false
}

func primitiveFromJSON(t avro.Type, v any, at string) (any, error) {
	switch t {
	case avro.Boolean:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return nil, jsonErr(at, "want a boolean, got %s", jsonKind(v))
	case avro.Int:
		n, ok := integer(v)
		if !ok || n < math.MinInt32 || n > math.MaxInt32 {
			return nil, jsonErr(at, "want a whole number that fits an Avro int (32 bits), got %s", jsonText(v))
		}
		return int(n), nil
	case avro.Long:
		if n, ok := integer(v); ok {
			return n, nil
		}
		return nil, jsonErr(at, "want a whole number (an Avro long), got %s", jsonText(v))
	case avro.Float:
		if f, ok := float(v); ok {
			return float32(f), nil
		}
		return nil, jsonErr(at, "want a number (an Avro float), got %s", jsonText(v))
	case avro.Double:
		if f, ok := float(v); ok {
			return f, nil
		}
		return nil, jsonErr(at, "want a number (an Avro double), got %s", jsonText(v))
	case avro.String:
		if s, ok := v.(string); ok {
			return s, nil
		}
		return nil, jsonErr(at, "want a string, got %s", jsonKind(v))
	case avro.Bytes:
		return bytesFromJSON(v, at)
	case avro.Null:
		if v == nil {
			return nil, nil
		}
		return nil, jsonErr(at, "want null, got %s", jsonKind(v))
	}
	return nil, jsonErr(at, "schema type %s is not supported", t)
}

func jsonText(v any) string {
	switch x := v.(type) {
	case int64, float64, int:
		return fmt.Sprint(x)
	case string:
		return strconv.Quote(x)
	}
	return jsonKind(v)
}

func bytesFromJSON(v any, at string) ([]byte, error) {
	s, ok := v.(string)
	if !ok {
		return nil, jsonErr(at, "want a base64 string (Avro bytes), got %s", jsonKind(v))
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, jsonErr(at, "want a base64 string (Avro bytes): %v", err)
	}
	return b, nil
}

// logicalFromJSON converts a logical type's JSON; done is false for a
// logical type it leaves to the underlying type.
func logicalFromJSON(s avro.Schema, l avro.LogicalSchema, v any, at string) (out any, err error, done bool) {
	str, isStr := v.(string)
	want := func(what string) (any, error, bool) {
		return nil, jsonErr(at, "want %s, got %s", what, jsonText(v)), true
	}
	switch l.Type() {
	case avro.Date:
		if n, ok := integer(v); ok {
			return time.Unix(n*86400, 0).UTC(), nil, true
		}
		if !isStr {
			return want(`a date such as "2006-01-02"`)
		}
		t, err := time.Parse(dateLayout, str)
		if err != nil {
			return want(`a date such as "2006-01-02"`)
		}
		return t, nil, true
	case avro.TimeMillis, avro.TimeMicros:
		if n, ok := integer(v); ok {
			if l.Type() == avro.TimeMillis {
				return time.Duration(n) * time.Millisecond, nil, true
			}
			return time.Duration(n) * time.Microsecond, nil, true
		}
		d, ok := parseTimeOfDay(str)
		if !isStr || !ok {
			return want(`a time of day such as "15:04:05.000"`)
		}
		return d, nil, true
	case avro.TimestampMillis, avro.TimestampMicros:
		if n, ok := integer(v); ok {
			if l.Type() == avro.TimestampMillis {
				return time.UnixMilli(n).UTC(), nil, true
			}
			return time.UnixMicro(n).UTC(), nil, true
		}
		t, err := time.Parse(time.RFC3339Nano, str)
		if !isStr || err != nil {
			return want(`an RFC 3339 time such as "2006-01-02T15:04:05.000Z"`)
		}
		return t, nil, true
	case avro.LocalTimestampMillis, avro.LocalTimestampMicros:
		if n, ok := integer(v); ok {
			if l.Type() == avro.LocalTimestampMillis {
				return time.UnixMilli(n).UTC(), nil, true
			}
			return time.UnixMicro(n).UTC(), nil, true
		}
		t, err := time.Parse("2006-01-02T15:04:05.999999999", str)
		if !isStr || err != nil {
			return want(`a local time such as "2006-01-02T15:04:05.000"`)
		}
		return t, nil, true
	case avro.Decimal:
		dl, _ := l.(*avro.DecimalLogicalSchema)
		r := new(big.Rat)
		switch x := v.(type) {
		case string:
			if _, ok := r.SetString(x); !ok {
				return want(`a decimal number such as "12.30"`)
			}
		case int64:
			r.SetInt64(x)
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return want("a decimal number")
			}
			r.SetFloat64(x)
		default:
			return want(`a decimal number such as "12.30"`)
		}
		if dl != nil {
			r = roundRat(r, dl.Scale())
		}
		if err := decimalFits(l, r, at); err != nil {
			return nil, err, true
		}
		return r, nil, true
	case avro.Duration:
		m, ok := v.(map[string]any)
		if !ok {
			return want(`a duration {"months": n, "days": n, "milliseconds": n}`)
		}
		var d avro.LogicalDuration
		for _, f := range []struct {
			k string
			p *uint32
		}{{"months", &d.Months}, {"days", &d.Days}, {"milliseconds", &d.Milliseconds}} {
			k, p := f.k, f.p
			n, ok := integer(m[k])
			if m[k] == nil {
				n, ok = 0, true
			}
			if !ok || n < 0 || n > math.MaxUint32 {
				return nil, jsonErr(at+"/"+k, "want a whole number from 0 to %d, got %s", uint32(math.MaxUint32), jsonText(m[k])), true
			}
			*p = uint32(n)
		}
		return d, nil, true
	}
	return nil, nil, false
}

// decimalFits refuses a decoded decimal with more digits than its
// schema's precision: the bytes hold any number, the type does not.
func decimalFits(l avro.LogicalSchema, r *big.Rat, at string) error {
	dl, ok := l.(*avro.DecimalLogicalSchema)
	if !ok || dl.Precision() <= 0 {
		return nil
	}
	digits := strings.TrimLeft(strings.Replace(strings.TrimPrefix(r.FloatString(dl.Scale()), "-"), ".", "", 1), "0")
	if len(digits) > dl.Precision() {
		return jsonErr(at, "the decimal %s has %d digits, more than its precision %d", r.FloatString(dl.Scale()), len(digits), dl.Precision())
	}
	return nil
}

// roundRat rounds r to scale digits after the point, half away from zero.
func roundRat(r *big.Rat, scale int) *big.Rat {
	f, _ := new(big.Rat).SetString(r.FloatString(scale))
	return f
}

func parseTimeOfDay(s string) (time.Duration, bool) {
	t, err := time.Parse("15:04:05.999999999", s)
	if err != nil {
		return 0, false
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute +
		time.Duration(t.Second())*time.Second + time.Duration(t.Nanosecond()), true
}

// AvroToJSON converts what hamba/avro's generic decoder read for schema s
// (the reader's schema, the data resolved to it) to the JSON values a
// handler sees, by the mapping above. The error is an *AvroJSONError.
func AvroToJSON(s avro.Schema, v any) (any, error) { return toJSON(s, v, "") }

func toJSON(s avro.Schema, v any, at string) (any, error) {
	s = deref(s)
	if l := logicalOf(s); l != nil {
		if r, ok := v.(*big.Rat); ok {
			if err := decimalFits(l, r, at); err != nil {
				return nil, err
			}
		}
		if out, ok := logicalToJSON(l, v); ok {
			return out, nil
		}
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		return nil, nil
	case *avro.PrimitiveSchema:
		return primitiveToJSON(s.Type(), v, at)
	case *avro.EnumSchema:
		if str, ok := v.(string); ok {
			return str, nil
		}
	case *avro.FixedSchema:
		rv := reflect.ValueOf(v)
		if rv.Kind() == reflect.Array && rv.Type().Elem().Kind() == reflect.Uint8 {
			b := make([]byte, rv.Len())
			reflect.Copy(reflect.ValueOf(b), rv)
			return base64.StdEncoding.EncodeToString(b), nil
		}
		if b, ok := v.([]byte); ok {
			return base64.StdEncoding.EncodeToString(b), nil
		}
	case *avro.ArraySchema:
		if items, ok := v.([]any); ok {
			out := make([]any, len(items))
			for i, it := range items {
				x, err := toJSON(s.Items(), it, at+"/"+strconv.Itoa(i))
				if err != nil {
					return nil, err
				}
				out[i] = x
			}
			return out, nil
		}
	case *avro.MapSchema:
		if m, ok := v.(map[string]any); ok {
			out := make(map[string]any, len(m))
			for k, x := range m {
				y, err := toJSON(s.Values(), x, at+"/"+pointerEscape(k))
				if err != nil {
					return nil, err
				}
				out[k] = y
			}
			return out, nil
		}
	case *avro.RecordSchema:
		if m, ok := v.(map[string]any); ok {
			out := make(map[string]any, len(s.Fields()))
			for _, f := range s.Fields() {
				y, err := toJSON(f.Type(), m[f.Name()], at+"/"+pointerEscape(f.Name()))
				if err != nil {
					return nil, err
				}
				out[f.Name()] = y
			}
			return out, nil
		}
	case *avro.UnionSchema:
		return unionToJSON(s, v, at)
	}
	return nil, jsonErr(at, "a decoded %T does not fit schema type %s", v, s.Type())
}

func unionToJSON(u *avro.UnionSchema, v any, at string) (any, error) {
	if v == nil {
		return nil, nil
	}
	// The generic decoder wraps a named or complex branch's value in a
	// map keyed by the branch's name, and leaves a primitive's bare.
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for k, x := range m {
			for _, t := range u.Types() {
				if branchName(t) == k {
					return toJSON(t, x, at)
				}
			}
		}
	}
	for _, t := range u.Types() {
		if _, prim := deref(t).(*avro.PrimitiveSchema); !prim {
			continue
		}
		if x, err := toJSON(t, v, at); err == nil {
			return x, nil
		}
	}
	for _, t := range u.Types() {
		if t.Type() == avro.Null {
			continue
		}
		if x, err := toJSON(t, v, at); err == nil {
			return x, nil
		}
	}
	return nil, jsonErr(at, "a decoded %T fits none of the union's branches (%s)", v, unionNames(u))
}

func primitiveToJSON(t avro.Type, v any, at string) (any, error) {
	switch t {
	case avro.Null:
		if v == nil {
			return nil, nil
		}
	case avro.Boolean:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case avro.Int, avro.Long:
		switch x := v.(type) {
		case int:
			return int64(x), nil
		case int32:
			return int64(x), nil
		case int64:
			return x, nil
		}
	case avro.Float, avro.Double:
		var f float64
		switch x := v.(type) {
		case float32:
			f = float64(x)
		case float64:
			f = x
		case int:
			f = float64(x)
		case int32:
			f = float64(x)
		case int64:
			f = float64(x)
		default:
			return nil, jsonErr(at, "a decoded %T is not a number", v)
		}
		switch {
		case math.IsNaN(f):
			return "NaN", nil
		case math.IsInf(f, 1):
			return "Infinity", nil
		case math.IsInf(f, -1):
			return "-Infinity", nil
		}
		return f, nil
	case avro.String:
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			return string(x), nil
		}
	case avro.Bytes:
		switch x := v.(type) {
		case []byte:
			return base64.StdEncoding.EncodeToString(x), nil
		case string:
			return base64.StdEncoding.EncodeToString([]byte(x)), nil
		}
	}
	return nil, jsonErr(at, "a decoded %T does not fit Avro %s", v, t)
}

func logicalToJSON(l avro.LogicalSchema, v any) (any, bool) {
	switch x := v.(type) {
	case time.Time:
		if y := x.UTC().Year(); y < 0 || y > 9999 {
			// Past what RFC 3339 can write: the number Avro holds.
			switch l.Type() {
			case avro.Date:
				return int64(math.Floor(float64(x.Unix()) / 86400)), true
			case avro.TimestampMillis, avro.LocalTimestampMillis:
				return x.UnixMilli(), true
			case avro.TimestampMicros, avro.LocalTimestampMicros:
				return x.UnixMicro(), true
			}
		}
		switch l.Type() {
		case avro.Date:
			return x.UTC().Format(dateLayout), true
		case avro.TimestampMillis:
			return x.UTC().Format(millisLayout), true
		case avro.TimestampMicros:
			return x.UTC().Format(microsLayout), true
		case avro.LocalTimestampMillis:
			return x.UTC().Format(localMillis), true
		case avro.LocalTimestampMicros:
			return x.UTC().Format(localMicros), true
		}
	case time.Duration:
		digits, unit := 3, time.Millisecond
		if l.Type() == avro.TimeMicros {
			digits, unit = 6, time.Microsecond
		}
		if x < 0 || x >= 24*time.Hour {
			return int64(x / unit), true // not a time of day: the number Avro holds
		}
		day := time.Unix(0, 0).UTC().Add(x)
		return day.Format("15:04:05." + strings.Repeat("0", digits)), true
	case *big.Rat:
		scale := 0
		if dl, ok := l.(*avro.DecimalLogicalSchema); ok {
			scale = dl.Scale()
		}
		return x.FloatString(scale), true
	case avro.LogicalDuration:
		return map[string]any{"months": int64(x.Months), "days": int64(x.Days), "milliseconds": int64(x.Milliseconds)}, true
	}
	return nil, false
}
