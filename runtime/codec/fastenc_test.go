package codec

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/hamba/avro/v2"

	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
)

// generalEncode is the codec's general encoding: spec.DecodeJSON,
// spec.AvroFromJSON, hamba/avro.
func generalEncode(c *Codec, s avro.Schema, js []byte) ([]byte, error) {
	v, err := spec.DecodeJSON(js)
	if err != nil {
		return nil, err
	}
	native, err := spec.AvroFromJSON(s, v)
	if err != nil {
		return nil, err
	}
	return c.api.Marshal(s, native)
}

const fastEncSchema = `{"type":"record","name":"R","namespace":"t","fields":[
 {"name":"s","type":"string"},{"name":"b","type":"boolean"},{"name":"i","type":"int"},{"name":"l","type":"long"},
 {"name":"d","type":"double"},{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B","C"]}},
 {"name":"a","type":{"type":"array","items":["null","long",{"type":"record","name":"In","fields":[{"name":"z","type":"string"},{"name":"y","type":"E"}]}]}},
 {"name":"u","type":["null","string"]},{"name":"n","type":"null"},
 {"name":"ds","type":"string","default":"dflt"},{"name":"di","type":"int","default":7},{"name":"dl","type":"long","default":-5},
 {"name":"dd","type":"double","default":1.5},{"name":"db","type":"boolean","default":true},{"name":"de","type":"E","default":"C"},
 {"name":"du","type":["null","long"],"default":null},{"name":"dv","type":["long","null"],"default":9},
 {"name":"dr","type":{"type":"record","name":"D","fields":[{"name":"x","type":"long"}]},"default":{"x":3}},
 {"name":"da","type":{"type":"array","items":"long"},"default":[1,2]},{"name":"dn","type":"null","default":null}]}`

// fastEncFull is a value of fastEncSchema with every field given.
const fastEncFull = `{"s":"hi","b":true,"i":-3,"l":1099511627776,"d":1e-9,"e":"B","a":[null,7,{"z":"q","y":"C"}],"u":"x","n":null,` +
	`"ds":"s","di":1,"dl":2,"dd":2.5,"db":false,"de":"A","du":4,"dv":null,"dr":{"x":1},"da":[],"dn":null}`

// fastEncMin is a value of fastEncSchema with only the fields that have no
// default.
const fastEncMin = `{"s":"hi","b":false,"i":0,"l":0,"d":0,"e":"A","a":[],"u":null,"n":null}`

// minWith returns fastEncMin with field s replaced by text.
func minWith(field, text string) string {
	repl := map[string]string{"s": `"s":"hi"`, "b": `"b":false`, "i": `"i":0`, "l": `"l":0`, "d": `"d":0`, "e": `"e":"A"`, "a": `"a":[]`, "u": `"u":null`, "n": `"n":null`}
	return strings.Replace(fastEncMin, repl[field], `"`+field+`":`+text, 1)
}

type fastEncCase struct {
	name   string
	schema string // "" for fastEncSchema
	json   string
	fast   bool // the fast path takes it (else it must decline)
}

var fastEncCases = []fastEncCase{
	{name: "every field given", json: fastEncFull, fast: true},
	{name: "fields missing take their defaults", json: fastEncMin, fast: true},
	{name: "fields in another order than the schema's", json: `{"n":null,"u":null,"a":[],"e":"A","d":0,"l":0,"i":0,"b":false,"s":"hi","dr":{"x":5},"ds":"z"}`, fast: true},
	{name: "whitespace everywhere", json: " \n{ \"s\" :\t\"hi\" , \"b\":false,\"i\":0 ,\"l\":0,\"d\":0,\"e\":\"A\",\"a\":[ null , 1 , { \"z\" : \"q\" , \"y\" : \"B\" } ],\"u\":null,\"n\":null\r\n}\n ", fast: true},
	{name: "a field missing without a default is refused", json: `{"b":false,"i":0,"l":0,"d":0,"e":"A","a":[],"u":null,"n":null}`},
	{name: "an unknown field is refused", json: strings.Replace(fastEncMin, `{`, `{"extra":1,`, 1)},
	{name: "a field given twice is left to the general path", json: strings.Replace(fastEncMin, `{`, `{"i":"x",`, 1)},
	{name: "a field given twice, both fitting, is left to the general path", json: strings.Replace(fastEncMin, `{`, `{"i":5,`, 1)},
	{name: "int at its bounds", json: minWith("i", "-2147483648"), fast: true},
	{name: "int past 32 bits is refused", json: minWith("i", "2147483648")},
	{name: "int written 3.0 is 3", json: minWith("i", "3.0"), fast: true},
	{name: "int written 2.5 is refused", json: minWith("i", "2.5")},
	{name: "int written as a string is refused", json: minWith("i", `"3"`)},
	{name: "long written 1.0 is 1", json: minWith("l", "1.0"), fast: true},
	{name: "long written 1e3 is 1000", json: minWith("l", "1e3"), fast: true},
	{name: "long written -1.5e1 is -15", json: minWith("l", "-1.5E+1"), fast: true},
	{name: "long at its bounds", json: minWith("l", "-9223372036854775808"), fast: true},
	{name: "long at its upper bound", json: minWith("l", "9223372036854775807"), fast: true},
	{name: "long past 64 bits is left to the general path", json: minWith("l", "9223372036854775808")},
	{name: "long 1e19 is refused", json: minWith("l", "1e19")},
	{name: "a number with a leading zero is not JSON", json: minWith("l", "01")},
	{name: "a number ending in a point is not JSON", json: minWith("d", "1.")},
	{name: "double from an integer", json: minWith("d", "12345678901234567"), fast: true},
	{name: "double minus zero written as an integer is zero", json: minWith("d", "-0"), fast: true},
	{name: "double minus zero", json: minWith("d", "-0.0"), fast: true},
	{name: "double at its largest", json: minWith("d", "1.7976931348623157e308"), fast: true},
	{name: "double at its smallest", json: minWith("d", "-4.9e-324"), fast: true},
	{name: "a double for a long is refused", json: minWith("a", "[-1e-300]")},
	{name: "double past 64 bits as an integer", json: minWith("d", "123456789012345678901234567890"), fast: true},
	{name: "double NaN as a string", json: minWith("d", `"NaN"`), fast: true},
	{name: "double Infinity as a string", json: minWith("d", `"Infinity"`), fast: true},
	{name: "double -Infinity as a string, escaped", json: minWith("d", `"-Infinit\u0079"`), fast: true},
	{name: "double as another string is refused", json: minWith("d", `"1.5"`)},
	{name: "double out of range is left to the general path", json: minWith("d", "1e999")},
	{name: "string with escapes", json: minWith("s", `"a\"b\\c\/d\b\f\n\r\t"`), fast: true},
	{name: "string with \\u00e9 and é", json: minWith("s", `"caf\u00e9 café \u0000 \u20AC"`), fast: true},
	{name: "string with a surrogate pair", json: minWith("s", `"\ud83d\ude00 😀"`), fast: true},
	{name: "string with a lone surrogate is left to the general path", json: minWith("s", `"\ud83d x"`)},
	{name: "string with a lone low surrogate is left to the general path", json: minWith("s", `"\ude00"`)},
	{name: "string with invalid UTF-8 is left to the general path", json: minWith("s", "\"a\xffb\"")},
	{name: "string with a raw control character is not JSON", json: minWith("s", "\"a\nb\"")},
	{name: "string with a bad escape is not JSON", json: minWith("s", `"\x"`)},
	{name: "an escaped key", json: strings.Replace(fastEncMin, `"s":`, `"\u0073":`, 1), fast: true},
	{name: "enum symbol not in the enum is refused", json: minWith("e", `"D"`)},
	{name: "boolean written as a number is refused", json: minWith("b", "1")},
	{name: "null field written as false is refused", json: minWith("n", "false")},
	{name: "union null branch", json: minWith("u", "null"), fast: true},
	{name: "union bare string", json: minWith("u", `"v"`), fast: true},
	{name: "union wrapped string", json: minWith("u", `{"string":"v"}`), fast: true},
	{name: "union wrapped null", json: minWith("u", `{"null":null}`), fast: true},
	{name: "union wrapped in a branch it does not fit is refused", json: minWith("u", `{"string":5}`)},
	{name: "union wrapped with two keys is refused", json: minWith("u", `{"string":"v","null":null}`)},
	{name: "union wrapped in an unknown branch is refused", json: minWith("u", `{"long":5}`)},
	{name: "union of no branch the value fits is refused", json: minWith("u", "5")},
	{name: "array of union branches: null, long, record", json: minWith("a", `[null,1,{"z":"x","y":"A"},{"long":2},{"t.In":{"z":"y","y":"B"}},{"record":{"z":"w","y":"C"}}]`), fast: true},
	{name: "array item that fits no branch is refused", json: minWith("a", `[true]`)},
	{name: "array of 250 items is written in blocks of 100", json: minWith("a", "["+strings.Repeat("1,", 249)+"2]"), fast: true},
	{name: "array of 150 nulls is written in blocks of no bytes", json: minWith("a", "["+strings.Repeat("null,", 149)+"null]"), fast: true},
	{name: "trailing data is not JSON", json: fastEncMin + " 1"},
	{name: "a trailing brace is left to the general path", json: fastEncMin + "}"},
	{name: "nothing is not JSON", json: " "},
	{name: "a truncated object is not JSON", json: fastEncMin[:len(fastEncMin)-1]},
	{name: "union of ints takes the first branch the value fits", schema: `{"type":"record","name":"U","fields":[{"name":"v","type":{"type":"array","items":["null","int","long","double","string"]}}]}`,
		json: `{"v":[1,3000000000,1.5,2.0,"s",null,{"double":3},{"long":4.0}]}`, fast: true},
	{name: "union of records takes the first record the object fits", schema: `{"type":"record","name":"U","fields":[{"name":"v","type":{"type":"array","items":[
		{"type":"record","name":"A","fields":[{"name":"a","type":"long"}]},{"type":"record","name":"B","fields":[{"name":"a","type":"string"},{"name":"b","type":"long","default":1}]}]}}]}`,
		json: `{"v":[{"a":1},{"a":"x"},{"a":"y","b":2},{"B":{"a":"z"}}]}`, fast: true},
	{name: "union of records: a key given twice is left to the general path", schema: `{"type":"record","name":"U","fields":[{"name":"v","type":[
		{"type":"record","name":"A","fields":[{"name":"a","type":"long"}]},{"type":"record","name":"B","fields":[{"name":"a","type":"string"}]}]}]}`,
		json: `{"v":{"a":"x","a":1}}`},
	{name: "nested arrays of records", schema: `{"type":"record","name":"N","fields":[{"name":"m","type":{"type":"array","items":{"type":"array","items":
		{"type":"record","name":"P","fields":[{"name":"q","type":["null",{"type":"array","items":"string"}]},{"name":"r","type":"int","default":-1}]}}}}]}`,
		json: `{"m":[[],[{"q":null},{"q":["a","b"],"r":2}],[{"r":3,"q":[]}]]}`, fast: true},
	{name: "a bare long", schema: `"long"`, json: ` -42 `, fast: true},
	{name: "a bare string", schema: `"string"`, json: `"x"`, fast: true},
	{name: "a bare union", schema: `["null","string"]`, json: `null`, fast: true},
}

func TestFastEncodeMatchesTheGeneralPath(t *testing.T) {
	c := New(nil, Options{})
	for _, tc := range fastEncCases {
		t.Run(tc.name, func(t *testing.T) {
			text := tc.schema
			if text == "" {
				text = fastEncSchema
			}
			s := avro.MustParse(text)
			enc := compileFastEncoder(s, map[string]bool{})
			if enc == nil {
				t.Fatalf("schema %s has no fast encoder", text)
			}
			var st encState
			got, ok := enc.encode(&st, nil, []byte(tc.json))
			want, err := generalEncode(c, s, []byte(tc.json))
			switch {
			case ok && err != nil:
				t.Fatalf("fast encode(%s) = % x; the general path refuses it: %v", tc.json, got, err)
			case ok && !bytes.Equal(got, want):
				t.Fatalf("fast encode(%s) = % x; the general path gives % x", tc.json, got, want)
			case ok != tc.fast:
				t.Fatalf("fast encode(%s) took it: %v, want %v (general path: % x, %v)", tc.json, ok, tc.fast, want, err)
			}
		})
	}
}

func TestFastEncodeCompiles(t *testing.T) {
	for _, text := range []string{`{"type":"long","logicalType":"timestamp-millis"}`, `"bytes"`, `"float"`,
		`{"type":"map","values":"long"}`, `{"type":"fixed","name":"F","size":2}`,
		`{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}`,
		`{"type":"record","name":"T","fields":[{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}}]}`} {
		if compileFastEncoder(avro.MustParse(text), map[string]bool{}) != nil {
			t.Errorf("schema %s has a fast encoder; it must be written the general way", text)
		}
	}
}

// TestEncodeTakesTheFastPathAndFramesIt: Encode's answer for JSON the fast
// path takes is the frame and the general path's binary.
func TestEncodeTakesTheFastPathAndFramesIt(t *testing.T) {
	s := avro.MustParse(fastEncSchema)
	c := New(nil, Options{})
	enc := c.encoder(s)
	if enc == nil || c.encoder(s) != enc {
		t.Fatal("the schema's fast encoder is not compiled once and cached")
	}
	want, err := generalEncode(c, s, []byte(fastEncFull))
	if err != nil {
		t.Fatal(err)
	}
	st := c.encStates.Get().(*encState)
	got, ok := enc.encode(st, AppendFrame(nil, 7, nil), []byte(fastEncFull))
	if !ok || !bytes.Equal(got, AppendFrame(nil, 7, want)) {
		t.Fatalf("fast encode after a frame = % x, %v; want % x", got, ok, AppendFrame(nil, 7, want))
	}
}

// FuzzFastEncode: whatever JSON, the fast path either declines it or
// gives exactly the bytes of the general path, which then takes it too.
func FuzzFastEncode(f *testing.F) {
	c := New(nil, Options{})
	type plan struct {
		s   avro.Schema
		enc *fastEncoder
	}
	var plans []plan
	for _, tc := range fastEncCases {
		text := tc.schema
		if text == "" {
			text = fastEncSchema
		}
		s := avro.MustParse(text)
		if len(plans) == 0 || plans[len(plans)-1].s.String() != s.String() {
			plans = append(plans, plan{s, compileFastEncoder(s, map[string]bool{})})
		}
		f.Add(uint8(len(plans)-1), []byte(tc.json))
	}
	f.Fuzz(func(t *testing.T, which uint8, js []byte) {
		p := plans[int(which)%len(plans)]
		var st encState
		got, ok := p.enc.encode(&st, nil, js)
		if !ok {
			return
		}
		want, err := generalEncode(c, p.s, js)
		if err != nil {
			t.Fatalf("fast path wrote %q as % x; the general path refuses it: %v", js, got, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("fast path wrote %q as % x; the general path as % x", js, got, want)
		}
	})
}

// TestEncodeGivesTheGeneralPathsAnswer: Encode, which takes the fast path
// when it can, answers every case as the general way alone does: the same
// body and id, or the same error.
func TestEncodeGivesTheGeneralPathsAnswer(t *testing.T) {
	reg, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := New(reg, Options{})
	types := map[string]*spec.Type{}
	for _, tc := range fastEncCases {
		text := tc.schema
		if text == "" {
			text = fastEncSchema
		}
		if !strings.HasPrefix(text, "{") {
			continue // a flow's type is a record, an enum or the like, never a bare primitive or union
		}
		typ, ok := types[text]
		if !ok {
			flow := "version: acemq.flow/v1\nname: f\ntypes:\n  T: {subject: s" + strconv.Itoa(len(types)) + ", avro: " + strings.ReplaceAll(text, "\n", " ") + "}\n"
			set, err := spec.Load(fstest.MapFS{"f.yaml": {Data: []byte(flow)}}, "f.yaml")
			if err != nil {
				t.Fatalf("Load(%s): %v", flow, err)
			}
			typ = set.Flows[0].Type("T")
			types[text] = typ
		}
		t.Run(tc.name, func(t *testing.T) {
			got, gotID, gotErr := c.Encode(t.Context(), typ, []byte(tc.json))
			want, wantID, wantErr := c.encodeGeneral(t.Context(), typ, []byte(tc.json))
			if !bytes.Equal(got, want) || gotID != wantID || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("Encode(%s) = % x, %d, %v; the general way gives % x, %d, %v", tc.json, got, gotID, gotErr, want, wantID, wantErr)
			}
			if tc.fast && gotErr != nil {
				t.Fatalf("Encode(%s) = %v; want the body", tc.json, gotErr)
			}
		})
	}
}

// FuzzFastEncodeRoundTrip: the JSON a handler is given for any message of
// a schema the fast encoder covers (what it most often writes back) is
// taken by the fast path, with the general path's bytes.
func FuzzFastEncodeRoundTrip(f *testing.F) {
	s := avro.MustParse(fastSchema)
	c := New(nil, Options{MaxBytes: 1 << 12})
	enc := compileFastEncoder(s, map[string]bool{})
	seed, err := avro.Marshal(s, map[string]any{"s": "h\u00e9\"<\n", "b": true, "i": -3, "l": int64(1) << 40, "d": 1e-9,
		"e": "B", "a": []any{nil, map[string]any{"long": int64(7)}, map[string]any{"In": map[string]any{"z": "q", "y": "C"}}},
		"Cap": map[string]any{"string": "x"}, "n": nil})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, payload []byte) {
		js, ok := general(t, c, s, payload)
		if !ok {
			return
		}
		var st encState
		got, ok := enc.encode(&st, nil, js)
		if !ok {
			t.Fatalf("the fast path declines %s, the JSON of % x", js, payload)
		}
		want, err := generalEncode(c, s, js)
		if err != nil {
			t.Fatalf("the general path refuses %s, the JSON of % x: %v", js, payload, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("fast path wrote %s as % x; the general path as % x", js, got, want)
		}
	})
}
