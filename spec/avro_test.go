package spec_test

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/hamba/avro/v2"

	"github.com/acemq/acemq-flow/spec"
)

func TestAvroTypeFromAnAvscFileIsParsedWithItsSubject(t *testing.T) {
	set, err := spec.LoadPaths(spec.Options{}, "testdata/valid/avro.yaml")
	if err != nil {
		t.Fatalf("Load(avro.yaml): %v", err)
	}
	f := set.Flows[0]
	placed, invoice := f.Type("OrderPlaced"), f.Type("Invoice")
	if !placed.IsAvro() || !invoice.IsAvro() {
		t.Fatalf("Load(avro.yaml): OrderPlaced and Invoice are not Avro types: %+v %+v", placed, invoice)
	}
	if placed.Subject != "avro-shop.OrderPlaced" || invoice.Subject != "billing.invoice-value" {
		t.Errorf("subjects = %q, %q; want avro-shop.OrderPlaced (the default) and billing.invoice-value", placed.Subject, invoice.Subject)
	}
	if placed.Avro.Ref != "schemas/order-placed.avsc" || placed.Avro.Schema == nil {
		t.Errorf("OrderPlaced: ref %q, schema %v; want the .avsc parsed", placed.Avro.Ref, placed.Avro.Schema)
	}
	if want := avro.MustParse(placed.Avro.Text).String(); placed.Avro.Canonical != want || !strings.HasPrefix(want, `{"name":"shop.OrderPlaced"`) {
		t.Errorf("OrderPlaced canonical form = %s, want %s", placed.Avro.Canonical, want)
	}
	if !strings.Contains(placed.Avro.Text, `"doc":"An order as the shop took it."`) || !strings.Contains(placed.Avro.Text, `"default":"WEB"`) {
		t.Errorf("OrderPlaced text lost its doc or a default: %s", placed.Avro.Text)
	}
	if invoice.ClaimCheck == nil || invoice.ClaimCheck.Above != 16<<10 {
		t.Errorf("Invoice claim check = %+v, want above 16KiB", invoice.ClaimCheck)
	}
	if string(invoice.Schema) != invoice.Avro.Text {
		t.Errorf("Invoice.Schema = %s, want the Avro schema's text %s", invoice.Schema, invoice.Avro.Text)
	}
}

func TestAvroSchemaErrorInAnAvscFileIsReportedAtTheField(t *testing.T) {
	_, err := spec.LoadPaths(spec.Options{}, "testdata/avro/flow.yaml")
	var ds spec.Diagnostics
	if !errors.As(err, &ds) || len(ds) != 1 {
		t.Fatalf("Load(avro/flow.yaml) = %v, want one diagnostic", err)
	}
	d := ds[0]
	if d.Code != "invalid-type" || d.Pos.File != "testdata/avro/bad.avsc" || d.Pos.Line != 6 || d.Pos.Col != 38 {
		t.Errorf("diagnostic at %s (%s), want testdata/avro/bad.avsc:6:38 (invalid-type): %s", d.Pos, d.Code, d)
	}
	if !strings.Contains(d.Msg, `type "Bad" is not a valid Avro schema: invalid default for field count`) {
		t.Errorf("message = %q, want hamba's reason in a sentence", d.Msg)
	}
}

func TestAvroTypesAreParsedEachOnItsOwn(t *testing.T) {
	// Two types defining the same record name must not clash (a shared
	// cache of named types would read the second as the first).
	fsys := fstest.MapFS{"f.yaml": {Data: []byte(`version: acemq.flow/v1
name: shop
types:
  A: {avro: {type: record, name: R, fields: [{name: a, type: string}]}}
  B: {avro: {type: record, name: R, fields: [{name: b, type: long}]}}
`)}}
	set, err := spec.Load(fsys, "f.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	a, b := set.Flows[0].Type("A").Avro.Canonical, set.Flows[0].Type("B").Avro.Canonical
	if a == b || !strings.Contains(b, `"name":"b"`) {
		t.Errorf("A = %s, B = %s; want each its own record", a, b)
	}
}

func avroType(t *testing.T, schema string) *spec.Type {
	t.Helper()
	var doc any
	if err := json.Unmarshal([]byte(schema), &doc); err != nil {
		t.Fatal(err)
	}
	y, _ := json.Marshal(map[string]any{"version": "acemq.flow/v1", "name": "f", "types": map[string]any{"T": map[string]any{"avro": doc}}})
	set, err := spec.Load(fstest.MapFS{"f.yaml": {Data: y}}, "f.yaml")
	if err != nil {
		t.Fatalf("Load(%s): %v", schema, err)
	}
	return set.Flows[0].Type("T")
}

const orderSchema = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"id","type":"string"},
 {"name":"qty","type":"int"},
 {"name":"total","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"raw","type":"bytes"},
 {"name":"ratio","type":"double"},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"either","type":["int","string"]},
 {"name":"ship","type":["null",{"type":"record","name":"Addr","fields":[{"name":"country","type":"string"}]}]},
 {"name":"tags","type":{"type":"map","values":"long"}},
 {"name":"lines","type":{"type":"array","items":{"type":"enum","name":"Kind","symbols":["A","B"]}}},
 {"name":"hash","type":{"type":"fixed","name":"H","size":2}},
 {"name":"channel","type":"string","default":"web"}]}`

func TestAvroJSONRoundTripsThroughAvroBinary(t *testing.T) {
	typ := avroType(t, orderSchema)
	in := `{"id":"o-1","qty":3,"total":"12.30","at":"2026-12-02T07:00:45.123Z","day":"2026-12-02","raw":"AAEC",` +
		`"ratio":"NaN","note":null,"either":"x","ship":{"country":"NL"},"tags":{"a":9007199254740993},"lines":["A","B"],"hash":"AQI="}`
	v, err := spec.DecodeJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if err := typ.Validate(v); err != nil {
		t.Fatalf("Validate(%s): %v", in, err)
	}
	native, err := spec.AvroFromJSON(typ.Avro.Schema, v)
	if err != nil {
		t.Fatalf("AvroFromJSON: %v", err)
	}
	bin, err := avro.Marshal(typ.Avro.Schema, native)
	if err != nil {
		t.Fatalf("avro.Marshal: %v", err)
	}
	var back any
	if err := avro.Unmarshal(typ.Avro.Schema, bin, &back); err != nil {
		t.Fatalf("avro.Unmarshal: %v", err)
	}
	out, err := spec.AvroToJSON(typ.Avro.Schema, back)
	if err != nil {
		t.Fatalf("AvroToJSON: %v", err)
	}
	got, _ := json.Marshal(out)
	want := `{"at":"2026-12-02T07:00:45.123Z","channel":"web","day":"2026-12-02","either":"x","hash":"AQI=","id":"o-1","lines":["A","B"],` +
		`"note":null,"qty":3,"ratio":"NaN","raw":"AAEC","ship":{"country":"NL"},"tags":{"a":9007199254740993},"total":"12.30"}`
	if string(got) != want {
		t.Errorf("round trip of %s\n got  %s\n want %s", in, got, want)
	}
}

func TestAvroValidateNamesWhereJSONDoesNotFit(t *testing.T) {
	typ := avroType(t, orderSchema)
	base := map[string]any{"id": "o", "qty": int64(1), "total": "1", "at": int64(0), "day": "2026-01-01", "raw": "", "ratio": 1.5,
		"either": int64(1), "ship": nil, "tags": map[string]any{}, "lines": []any{}, "hash": "AAA="}
	cases := []struct {
		name   string
		change func(m map[string]any)
		want   string // "" valid
	}{
		{"the base payload fits", func(map[string]any) {}, ""},
		{"a missing field without a default is named", func(m map[string]any) { delete(m, "id") }, `field "id" of record shop.Order is missing`},
		{"a missing field with a default takes it", func(m map[string]any) { delete(m, "channel"); delete(m, "note") }, ""},
		{"a key the record has no field for is refused, never dropped", func(m map[string]any) { m["extra"] = true }, `at /extra: record shop.Order has no field "extra"`},
		{"an int past 32 bits is refused", func(m map[string]any) { m["qty"] = int64(math.MaxInt32) + 1 }, "at /qty: want a whole number that fits an Avro int"},
		{"a symbol not in the enum is named", func(m map[string]any) { m["lines"] = []any{"C"} }, `at /lines/0: "C" is not a symbol of enum shop.Kind`},
		{"a value no union branch fits", func(m map[string]any) { m["either"] = true }, "at /either: a boolean fits none of the union's branches (int, string)"},
		{"Avro's own union encoding picks a branch", func(m map[string]any) { m["either"] = map[string]any{"string": "x"} }, ""},
		{"fixed of the wrong size", func(m map[string]any) { m["hash"] = "AA==" }, "at /hash: fixed shop.H holds 2 bytes, got 1"},
		{"a timestamp not RFC 3339", func(m map[string]any) { m["at"] = "yesterday" }, "at /at: want an RFC 3339 time"},
		{"a decimal past its precision", func(m map[string]any) { m["total"] = "12345678.9" }, "at /total: the decimal 12345678.90 has 10 digits, more than its precision 9"},
		{"a timestamp as epoch milliseconds", func(m map[string]any) { m["at"] = int64(-62135596800001) }, ""},
		{"bytes not base64", func(m map[string]any) { m["raw"] = "!!" }, "at /raw: want a base64 string"},
		{"a nested record's field", func(m map[string]any) { m["ship"] = map[string]any{"country": int64(1)} }, "at /ship: an object fits none of the union's branches"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]any{}
			for k, v := range base {
				m[k] = v
			}
			tc.change(m)
			err := typ.Validate(m)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v, want it valid", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestWhenSeesAvroTypesAsJSON(t *testing.T) {
	cases := []struct {
		when string
		ok   bool
	}{
		{"payload.qty > 2 && payload.id startsWith 'o'", true},
		{"payload.ship != nil && payload.ship.country == 'NL'", true},
		{"payload.ship.contry == 'NL'", false},
		{"payload.total == '12.30' && payload.at > '2026'", true},
		{"payload.tags.a > 1", true},
		{"len(payload.lines) > 0 && payload.lines[0] == 'A'", true},
		{"payload.qty == 'three'", false},
		{"payload.ratio > 0.5", true},
	}
	for _, tc := range cases {
		t.Run(tc.when, func(t *testing.T) {
			doc := map[string]any{"version": "acemq.flow/v1", "name": "f",
				"types":       map[string]any{"T": map[string]any{"avro": json.RawMessage(orderSchema)}},
				"itineraries": []any{map[string]any{"name": "i", "input": "T", "stops": []any{map[string]any{"name": "s", "exchange": "x", "routing_key": "k", "when": tc.when}}}},
				"topology":    map[string]any{"exchanges": []any{map[string]any{"name": "x", "type": "topic"}}},
			}
			y, _ := json.Marshal(doc)
			_, err := spec.Load(fstest.MapFS{"f.yaml": {Data: y}}, "f.yaml")
			if (err == nil) != tc.ok {
				t.Errorf("Load with when %q: %v, want ok = %v", tc.when, err, tc.ok)
			}
		})
	}
}

func TestAvroToJSONOfResolvedData(t *testing.T) {
	// An old writer's data read by a newer reader: its added field takes
	// the default, int is promoted to long.
	w := avro.MustParse(`{"type":"record","name":"R","fields":[{"name":"n","type":"int"}]}`)
	r := avro.MustParse(`{"type":"record","name":"R","fields":[{"name":"n","type":"long"},{"name":"m","type":"string","default":"d"}]}`)
	bin, err := avro.Marshal(w, map[string]any{"n": 7})
	if err != nil {
		t.Fatal(err)
	}
	res, err := avro.NewSchemaCompatibility().Resolve(r, w)
	if err != nil {
		t.Fatal(err)
	}
	var native any
	if err := avro.Unmarshal(res, bin, &native); err != nil {
		t.Fatal(err)
	}
	out, err := spec.AvroToJSON(r, native)
	if err != nil {
		t.Fatalf("AvroToJSON: %v", err)
	}
	if want := map[string]any{"n": int64(7), "m": "d"}; !reflect.DeepEqual(out, want) {
		t.Errorf("AvroToJSON = %#v, want %#v", out, want)
	}
}
