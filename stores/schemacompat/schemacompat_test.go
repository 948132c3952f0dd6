package schemacompat_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/schemacompat"
)

func parse(t *testing.T, typ stores.SchemaType, text string) *schemacompat.Parsed {
	t.Helper()
	p, err := schemacompat.Parse(typ, text)
	if err != nil {
		t.Fatalf("Parse(%s, %s): %v", typ, text, err)
	}
	return p
}

func rec(fields string) string {
	return `{"type":"record","name":"Order","namespace":"shop","fields":[` + fields + `]}`
}

func TestCompareAvro(t *testing.T) {
	cases := []struct {
		name           string
		reader, writer string
		path           string // "" = compatible
		reason         string // a part of the reason
	}{
		{"the same schema reads itself", rec(`{"name":"id","type":"string"}`), rec(`{"name":"id","type":"string"}`), "", ""},
		{"a new field with a default reads old data", rec(`{"name":"id","type":"string"},{"name":"n","type":"int","default":1}`), rec(`{"name":"id","type":"string"}`), "", ""},
		{"a new field without a default does not", rec(`{"name":"id","type":"string"},{"name":"n","type":"int"}`), rec(`{"name":"id","type":"string"}`), "shop.Order.n", "without a default"},
		{"a dropped field is fine for the reader", rec(`{"name":"id","type":"string"}`), rec(`{"name":"id","type":"string"},{"name":"n","type":"int"}`), "", ""},
		{"int widens to long", rec(`{"name":"n","type":"long"}`), rec(`{"name":"n","type":"int"}`), "", ""},
		{"long does not narrow to int", rec(`{"name":"n","type":"int"}`), rec(`{"name":"n","type":"long"}`), "shop.Order.n", "long to int"},
		{"a renamed field read through an alias", rec(`{"name":"total","aliases":["sum"],"type":"int"}`), rec(`{"name":"sum","type":"int"}`), "", ""},
		{"a removed enum symbol is named", rec(`{"name":"s","type":{"type":"enum","name":"State","symbols":["A"]}}`), rec(`{"name":"s","type":{"type":"enum","name":"State","symbols":["A","B"]}}`), "shop.Order.s", "symbol B"},
		{"inside arrays and nested records", rec(`{"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[{"name":"sku","type":"int"}]}}}`),
			rec(`{"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[{"name":"sku","type":"string"}]}}}`), "shop.Order.lines[].sku", "string to int"},
		{"inside map values", rec(`{"name":"m","type":{"type":"map","values":"int"}}`), rec(`{"name":"m","type":{"type":"map","values":"string"}}`), "shop.Order.m{}", "string to int"},
		{"inside an optional record", rec(`{"name":"a","type":["null",{"type":"record","name":"Addr","fields":[{"name":"zip","type":"string"},{"name":"city","type":"string"}]}]}`),
			rec(`{"name":"a","type":["null",{"type":"record","name":"Addr","fields":[{"name":"zip","type":"string"}]}]}`), "shop.Order.a.city", "without a default"},
		{"a union that loses a branch", rec(`{"name":"v","type":["null","int"]}`), rec(`{"name":"v","type":["null","int","string"]}`), "shop.Order.v", "string"},
		{"a field made optional", rec(`{"name":"v","type":["null","int"]}`), rec(`{"name":"v","type":"int"}`), "", ""},
		{"a recursive record compares without looping", `{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"w","type":"int"},{"name":"next","type":["null","Node"]}]}`,
			`{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"]}]}`, "Node.w", "without a default"},
		{"a recursive record reads itself", `{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}`, `{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}`, "", ""},
		{"a renamed record", `{"type":"record","name":"Bill","fields":[]}`, `{"type":"record","name":"Invoice","fields":[]}`, "Bill", "Invoice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := schemacompat.Compare(parse(t, stores.SchemaAvro, tc.reader), parse(t, stores.SchemaAvro, tc.writer))
			switch {
			case tc.path == "" && p != nil:
				t.Fatalf("Compare = %s: %s, want compatible", p.Path, p.Reason)
			case tc.path != "" && p == nil:
				t.Fatalf("Compare = compatible, want incompatible at %s", tc.path)
			case tc.path != "" && (p.Path != tc.path || !strings.Contains(p.Reason, tc.reason)):
				t.Fatalf("Compare = %s: %s; want %s and a reason with %q", p.Path, p.Reason, tc.path, tc.reason)
			}
		})
	}
}

func TestCompareJSONSchema(t *testing.T) {
	obj := func(props, extra string) string {
		s := `{"type":"object","properties":{` + props + `}`
		if extra != "" {
			s += "," + extra
		}
		return s + "}"
	}
	cases := []struct {
		name           string
		reader, writer string
		path           string
		reason         string
	}{
		{"the same schema", obj(`"a":{"type":"string"}`, ""), obj(`"a":{"type":"string"}`, ""), "", ""},
		{"annotations are not compared", obj(`"a":{"type":"string","description":"new words"}`, `"title":"T"`), obj(`"a":{"type":"string"}`, ""), "", ""},
		{"a property newly required", obj(`"a":{"type":"string"}`, `"required":["a"]`), obj(`"a":{"type":"string"}`, ""), "$.a", "now required"},
		{"a type narrowed", obj(`"a":{"type":"integer"}`, ""), obj(`"a":{"type":"number"}`, ""), "$.a", "number"},
		{"a type widened", obj(`"a":{"type":"number"}`, ""), obj(`"a":{"type":"integer"}`, ""), "", ""},
		{"a type made nullable", obj(`"a":{"type":["string","null"]}`, ""), obj(`"a":{"type":"string"}`, ""), "", ""},
		{"an enum value removed", obj(`"s":{"enum":["A"]}`, ""), obj(`"s":{"enum":["A","B"]}`, ""), "$.s", `"B"`},
		{"an enum value added", obj(`"s":{"enum":["A","B"]}`, ""), obj(`"s":{"enum":["A"]}`, ""), "", ""},
		{"additionalProperties tightened", obj(`"a":{"type":"string"}`, `"additionalProperties":false`), obj(`"a":{"type":"string"}`, ""), "$.*", "narrowed"},
		{"a constrained property added to an open object", obj(`"a":{"type":"string"},"b":{"type":"integer"}`, ""), obj(`"a":{"type":"string"}`, ""), "$.b", "is new"},
		{"a property added to a closed object", obj(`"a":{"type":"string"},"b":{"type":"integer"}`, `"additionalProperties":false`), obj(`"a":{"type":"string"}`, `"additionalProperties":false`), "", ""},
		{"a property removed from a closed reader", obj(``, `"additionalProperties":false`), obj(`"a":{"type":"string"}`, `"additionalProperties":false`), "$.a", "removed"},
		{"maxLength lowered", obj(`"a":{"type":"string","maxLength":5}`, ""), obj(`"a":{"type":"string","maxLength":10}`, ""), "$.a", "maxLength fell from 10 to 5"},
		{"minimum lowered", obj(`"n":{"type":"number","minimum":0}`, ""), obj(`"n":{"type":"number","minimum":1}`, ""), "", ""},
		{"inside array items", `{"type":"array","items":{"type":"object","properties":{"sku":{"type":"integer"}}}}`, `{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"}}}}`, "$[].sku", "string"},
		{"a keyword it does not compare changed", obj(`"a":{"oneOf":[{"type":"string"}]}`, ""), obj(`"a":{"oneOf":[{"type":"string"},{"type":"null"}]}`, ""), "$.a", "oneOf changed"},
		{"tuple items of an older draft changed", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":[{"type":"integer"}]}`, `{"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":[{"type":"string"}]}`, "$[]", "changed"},
		{"a pattern added", obj(`"a":{"type":"string","pattern":"^x"}`, ""), obj(`"a":{"type":"string"}`, ""), "$.a", "pattern"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := schemacompat.Compare(parse(t, stores.SchemaJSON, tc.reader), parse(t, stores.SchemaJSON, tc.writer))
			switch {
			case tc.path == "" && p != nil:
				t.Fatalf("Compare = %s: %s, want compatible", p.Path, p.Reason)
			case tc.path != "" && p == nil:
				t.Fatalf("Compare = compatible, want incompatible at %s", tc.path)
			case tc.path != "" && (p.Path != tc.path || !strings.Contains(p.Reason, tc.reason)):
				t.Fatalf("Compare = %s: %s; want %s and a reason with %q", p.Path, p.Reason, tc.path, tc.reason)
			}
		})
	}
}

func TestCheckLevels(t *testing.T) {
	v := func(n int, text string) stores.SchemaVersion {
		p := parse(t, stores.SchemaAvro, text)
		return stores.SchemaVersion{Subject: "s", Version: n, Schema: stores.Schema{ID: n, Type: p.Type, Text: p.Text, Canonical: p.Canonical}}
	}
	// v1 has a and b; v2 adds c with a default; the candidate drops b
	// (no default in v1) and keeps c.
	v1 := v(1, rec(`{"name":"a","type":"int"},{"name":"b","type":"int"}`))
	v2 := v(2, rec(`{"name":"a","type":"int"},{"name":"b","type":"int","default":0},{"name":"c","type":"int","default":0}`))
	candidate := parse(t, stores.SchemaAvro, rec(`{"name":"a","type":"int"},{"name":"c","type":"int","default":0}`))
	cases := []struct {
		level     stores.Compatibility
		version   int // 0 = compatible
		direction string
	}{
		{stores.CompatNone, 0, ""},
		{stores.CompatBackward, 0, ""},
		{stores.CompatBackwardTransitive, 0, ""},
		{stores.CompatForward, 0, ""}, // v2 has b with a default
		{stores.CompatForwardTransitive, 1, "forward"},
		{stores.CompatFull, 0, ""},
		{stores.CompatFullTransitive, 1, "forward"},
	}
	for _, tc := range cases {
		t.Run(string(tc.level), func(t *testing.T) {
			err := schemacompat.Check(tc.level, candidate, []stores.SchemaVersion{v1, v2})
			var ie *stores.IncompatibleSchemaError
			switch {
			case tc.version == 0 && err != nil:
				t.Fatalf("Check(%s) = %v, want compatible", tc.level, err)
			case tc.version != 0 && !errors.As(err, &ie):
				t.Fatalf("Check(%s) = %v, want an *IncompatibleSchemaError", tc.level, err)
			case tc.version != 0 && (ie.Version != tc.version || ie.Direction != tc.direction || ie.Path != "shop.Order.b"):
				t.Fatalf("Check(%s) = version %d %s at %s, want version %d %s at shop.Order.b", tc.level, ie.Version, ie.Direction, ie.Path, tc.version, tc.direction)
			}
		})
	}
	// A schema of another type is incompatible unless NONE.
	j := parse(t, stores.SchemaJSON, `{"type":"object"}`)
	if err := schemacompat.Check(stores.CompatBackward, j, []stores.SchemaVersion{v1}); !errors.Is(err, stores.ErrIncompatibleSchema) {
		t.Fatalf("Check of a JSON Schema against an Avro version = %v, want incompatible", err)
	}
}

func TestParseCanonical(t *testing.T) {
	a := parse(t, stores.SchemaAvro, `{"type":"record","name":"R","namespace":"x","doc":"d","fields":[{"name":"n","type":"int","default":3}]}`)
	if a.Canonical != `{"name":"x.R","type":"record","fields":[{"name":"n","type":"int"}]}` {
		t.Errorf("Avro canonical = %s", a.Canonical)
	}
	if !strings.Contains(a.Text, `"default":3`) || !strings.Contains(a.Text, `"doc":"d"`) {
		t.Errorf("Avro text = %s, want its default and doc kept", a.Text)
	}
	// A named type is never resolved through a schema parsed before.
	if _, err := schemacompat.Parse(stores.SchemaAvro, `{"type":"record","name":"S","fields":[{"name":"r","type":"x.R"}]}`); err == nil {
		t.Error("Parse of a schema naming a type it does not define: nil error, want invalid")
	}
	j := parse(t, stores.SchemaJSON, `{ "type" : "object", "properties": {"b": {"maximum": 1.50}, "a": {"const": "<&>"}}}`)
	if j.Canonical != `{"properties":{"a":{"const":"<&>"},"b":{"maximum":1.50}},"type":"object"}` {
		t.Errorf("JSON canonical = %s", j.Canonical)
	}
	if _, err := schemacompat.Parse(stores.SchemaJSON, `{"$ref":"file:///etc/passwd"}`); err == nil {
		t.Error("Parse of a JSON Schema referring to a file: nil error, want invalid")
	}
}
