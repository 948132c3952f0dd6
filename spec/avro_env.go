package spec

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/hamba/avro/v2"
)

// envType is the Go type a `when` expression is type-checked against for a
// payload of t.
func (t *Type) envType() reflect.Type {
	if t.IsAvro() {
		return avroEnvType(t.Avro.Schema, 0)
	}
	return envType(t.schema, 0)
}

// avroEnvType maps an Avro schema to the Go type a `when` expression sees,
// as envType does for JSON Schema and following the JSON the handlers see
// (AvroToJSON): a record is a struct of its fields (so a misspelt field
// fails to compile), an array a slice, a map map[string]…, int and long
// int, float and double float64, string, enum, bytes, fixed and every
// logical type but the numeric ones string, and a union of null and one
// record a pointer to its struct (so `payload.addr != nil` compiles). Any
// other union is `any`, checked when it runs.
func avroEnvType(s avro.Schema, depth int) reflect.Type {
	anyType := reflect.TypeFor[any]()
	if s == nil || depth > 16 {
		return anyType
	}
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		switch l.Logical().Type() {
		case avro.Date, avro.TimeMillis, avro.TimeMicros, avro.TimestampMillis, avro.TimestampMicros,
			avro.LocalTimestampMillis, avro.LocalTimestampMicros, avro.UUID, avro.Decimal:
			return reflect.TypeFor[string]()
		case avro.Duration:
			return reflect.TypeFor[map[string]any]()
		}
	}
	switch s := s.(type) {
	case *avro.PrimitiveSchema:
		switch s.Type() {
		case avro.Boolean:
			return reflect.TypeFor[bool]()
		case avro.Int, avro.Long:
			return reflect.TypeFor[int]()
		case avro.Float, avro.Double:
			// NaN and ±Infinity are the strings "NaN", "Infinity" and
			// "-Infinity" in JSON; a comparison with them runs untyped.
			return reflect.TypeFor[float64]()
		case avro.String, avro.Bytes:
			return reflect.TypeFor[string]()
		}
	case *avro.EnumSchema, *avro.FixedSchema:
		return reflect.TypeFor[string]()
	case *avro.ArraySchema:
		return reflect.SliceOf(avroEnvType(s.Items(), depth+1))
	case *avro.MapSchema:
		return reflect.MapOf(reflect.TypeFor[string](), avroEnvType(s.Values(), depth+1))
	case *avro.UnionSchema:
		if s.Nullable() {
			types := s.Types()
			other := types[0]
			if other.Type() == avro.Null {
				other = types[1]
			}
			if et := avroEnvType(other, depth+1); et.Kind() == reflect.Struct {
				return reflect.PointerTo(et)
			}
		}
		return anyType
	case *avro.RecordSchema:
		fields := s.Fields()
		if len(fields) == 0 {
			return reflect.TypeFor[map[string]any]()
		}
		names := make([]string, 0, len(fields))
		byName := map[string]*avro.Field{}
		for _, f := range fields {
			names = append(names, f.Name())
			byName[f.Name()] = f
		}
		sort.Strings(names)
		out := make([]reflect.StructField, 0, len(names))
		for i, n := range names {
			out = append(out, reflect.StructField{
				Name: fmt.Sprintf("F%d", i),
				Type: avroEnvType(byName[n].Type(), depth+1),
				Tag:  reflect.StructTag(fmt.Sprintf(`expr:%q json:%q`, n, n)),
			})
		}
		return reflect.StructOf(out)
	}
	return anyType
}

// avroFieldList names a record schema's fields, sorted, for hints.
func avroFieldList(s avro.Schema) string {
	r, ok := s.(*avro.RecordSchema)
	if !ok || len(r.Fields()) == 0 {
		return "(none declared)"
	}
	names := make([]string, 0, len(r.Fields()))
	for _, f := range r.Fields() {
		names = append(names, f.Name())
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
