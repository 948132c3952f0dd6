package spec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
)

// checkSchemas are the schemas the check is tested and fuzzed on, by index.
var checkSchemas = []string{
	// 0: the bench's record (test/bench/avro_test.go).
	`{"type":"record","name":"Doc","fields":[{"name":"id","type":"string"},{"name":"n","type":"long"},{"name":"note","type":"string"}]}`,
	// 1: every primitive the check covers.
	`{"type":"record","name":"Prims","fields":[{"name":"b","type":"boolean"},{"name":"i","type":"int"},{"name":"l","type":"long"},
	  {"name":"f","type":"float"},{"name":"d","type":"double"},{"name":"s","type":"string"},
	  {"name":"e","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},{"name":"z","type":"null"}]}`,
	// 2: defaults, unions in fields, nested records, arrays and maps.
	`{"type":"record","name":"Order","namespace":"shop","fields":[
	  {"name":"id","type":"string","default":"none"},
	  {"name":"u","type":["null","string","long",{"type":"record","name":"Ref","fields":[{"name":"k","type":"string"}]}]},
	  {"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[{"name":"sku","type":"string"},{"name":"qty","type":"int"}]}}},
	  {"name":"tags","type":{"type":"map","values":"double"},"default":{}},
	  {"name":"opt","type":["null",{"type":"record","name":"Addr","fields":[{"name":"city","type":"string"}]}],"default":null}]}`,
	// 3: a union at the top.
	`["null","int","string",{"type":"record","name":"P","fields":[{"name":"x","type":"long"}]},{"type":"enum","name":"E","symbols":["A","B"]}]`,
	// 4: a recursive record.
	`{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"],"default":null}]}`,
	// 5: types the check never takes (logical, bytes), beside ones it does.
	`{"type":"record","name":"Mixed","fields":[{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"},"default":0},
	  {"name":"raw","type":["bytes","string"]},{"name":"s","type":"string"}]}`,
}

func checkType(t testing.TB, i int) *Type {
	t.Helper()
	s, err := avro.Parse(checkSchemas[i])
	if err != nil {
		t.Fatalf("avro.Parse(schema %d): %v", i, err)
	}
	return &Type{Name: fmt.Sprintf("T%d", i), Avro: &AvroSchema{Schema: s, check: compileAvroCheck(s)}}
}

// treeValidate is ValidateJSON without the check: the JSON tree and
// AvroFromJSON.
func treeValidate(typ *Type, body []byte) error {
	v, err := DecodeJSON(body)
	if err != nil {
		return fmt.Errorf("payload is not JSON: %w", err)
	}
	return typ.Validate(v)
}

var checkCases = []struct {
	name   string
	schema int
	json   string
	fits   bool // the check's verdict: surely fits
}{
	{"the bench's record fits", 0, `{"id":"doc","n":42,"note":"xxxx"}`, true},
	{"fields in another order fit", 0, `{"note":"x","n":-7,"id":"d"}`, true},
	{"whitespace around and inside fits", 0, " \n\t{ \"id\" : \"d\" ,\r\n \"n\" : 1 , \"note\" : \"\" } \n", true},
	{"a missing field without default is left to the tree", 0, `{"id":"d","n":1}`, false},
	{"an unknown extra field is left to the tree", 0, `{"id":"d","n":1,"note":"x","extra":1}`, false},
	{"a key given twice is left to the tree", 0, `{"id":"d","n":1,"note":"x","n":2}`, false},
	{"1.0 for a long fits", 0, `{"id":"d","n":1.0,"note":"x"}`, true},
	{"1e3 for a long fits", 0, `{"id":"d","n":1e3,"note":"x"}`, true},
	{"1.5 for a long is left to the tree", 0, `{"id":"d","n":1.5,"note":"x"}`, false},
	{"a long past int64 is left to the tree", 0, `{"id":"d","n":9223372036854775808,"note":"x"}`, false},
	{"the largest long fits", 0, `{"id":"d","n":-9223372036854775808,"note":"x"}`, true},
	{"a string for a long is left to the tree", 0, `{"id":"d","n":"1","note":"x"}`, false},
	{"unicode escapes fit", 0, `{"id":"\u00e9\u4e2d","n":1,"note":"a\n\"\\\/\b\f\r\t"}`, true},
	{"a surrogate pair fits", 0, `{"id":"\ud83d\ude00","n":1,"note":"x"}`, true},
	{"a lone surrogate is left to the tree", 0, `{"id":"\ud83d","n":1,"note":"x"}`, false},
	{"an escaped key fits", 0, `{"\u0069d":"d","n":1,"note":"x"}`, true},
	{"raw UTF-8 fits", 0, `{"id":"日本語","n":1,"note":"é"}`, true},
	{"invalid UTF-8 is left to the tree", 0, "{\"id\":\"\xff\",\"n\":1,\"note\":\"x\"}", false},
	{"a control character in a string is left to the tree", 0, "{\"id\":\"a\x01\",\"n\":1,\"note\":\"x\"}", false},
	{"trailing garbage is left to the tree", 0, `{"id":"d","n":1,"note":"x"} x`, false},
	{"a second value is left to the tree", 0, `{"id":"d","n":1,"note":"x"}{}`, false},
	{"a stray brace is left to the tree", 0, `{"id":"d","n":1,"note":"x"}}`, false},
	{"an unclosed record is left to the tree", 0, `{"id":"d","n":1,"note":"x"`, false},
	{"an empty body is left to the tree", 0, ``, false},
	{"an array for a record is left to the tree", 0, `[]`, false},

	{"every primitive fits", 1, `{"b":true,"i":2147483647,"l":-1,"f":1.5,"d":-2e-3,"s":"s","e":"GREEN","z":null}`, true},
	{"NaN and Infinity strings fit a float and a double", 1, `{"b":false,"i":-2147483648,"l":0,"f":"NaN","d":"-Infinity","s":"","e":"RED","z":null}`, true},
	{"an int past 32 bits is left to the tree", 1, `{"b":true,"i":2147483648,"l":0,"f":1,"d":1,"s":"","e":"RED","z":null}`, false},
	{"a number past float64 is left to the tree", 1, `{"b":true,"i":1,"l":0,"f":1,"d":1e400,"s":"","e":"RED","z":null}`, false},
	{"another string for a double is left to the tree", 1, `{"b":true,"i":1,"l":0,"f":"nan","d":1,"s":"","e":"RED","z":null}`, false},
	{"a symbol not in the enum is left to the tree", 1, `{"b":true,"i":1,"l":0,"f":1,"d":1,"s":"","e":"BLUE","z":null}`, false},
	{"a number for a boolean is left to the tree", 1, `{"b":1,"i":1,"l":0,"f":1,"d":1,"s":"","e":"RED","z":null}`, false},
	{"a value for null is left to the tree", 1, `{"b":true,"i":1,"l":0,"f":1,"d":1,"s":"","e":"RED","z":0}`, false},
	{"a misspelt literal is left to the tree", 1, `{"b":tru,"i":1,"l":0,"f":1,"d":1,"s":"","e":"RED","z":null}`, false},
	{"a number with a leading zero is left to the tree", 1, `{"b":true,"i":01,"l":0,"f":1,"d":1,"s":"","e":"RED","z":null}`, false},

	{"fields with defaults may be missing", 2, `{"u":null,"lines":[]}`, true},
	{"nested records, arrays, maps and union branches fit", 2, `{"id":"o","u":"s","lines":[{"sku":"a","qty":1},{"qty":2,"sku":"b"}],"tags":{"x":1.5,"y":2},"opt":{"city":"Oslo"}}`, true},
	{"a long branch fits", 2, `{"u":12,"lines":[]}`, true},
	{"a record branch fits unwrapped", 2, `{"u":{"k":"v"},"lines":[]}`, true},
	{"a branch wrapped by its full name fits", 2, `{"u":{"shop.Ref":{"k":"v"}},"lines":[]}`, true},
	{"a branch wrapped by its type fits", 2, `{"u":{"long":3},"lines":[]}`, true},
	{"a wrapped branch with a second key is left to the tree", 2, `{"u":{"long":3,"string":"x"},"lines":[]}`, false},
	{"a wrapped value that does not fit its branch is left to the tree", 2, `{"u":{"long":"x"},"lines":[]}`, false},
	{"a value fitting no branch is left to the tree", 2, `{"u":true,"lines":[]}`, false},
	{"a bad item deep in an array is left to the tree", 2, `{"u":null,"lines":[{"sku":"a","qty":1},{"sku":"b","qty":1.5}]}`, false},
	{"a map value that does not fit is left to the tree", 2, `{"u":null,"lines":[],"tags":{"x":"y"}}`, false},
	{"a map key given twice fits when both values do", 2, `{"u":null,"lines":[],"tags":{"x":1,"x":2}}`, true},
	{"a missing union field without default is left to the tree", 2, `{"lines":[]}`, false},
	{"a trailing comma is left to the tree", 2, `{"u":null,"lines":[1,],}`, false},

	{"null fits a union with null", 3, `null`, true},
	{"an int fits the union", 3, ` 7 `, true},
	{"a string fits the union", 3, `"A"`, true},
	{"a record fits the union", 3, `{"x":5}`, true},
	{"an enum wrapped fits the union", 3, `{"E":"B"}`, true},
	{"a boolean fits no branch", 3, `false`, false},
	{"an unknown wrapper is left to the tree", 3, `{"Q":1}`, false},

	{"a recursive record fits", 4, `{"v":1,"next":{"v":2,"next":{"v":3}}}`, true},
	{"a recursive record with a bad leaf is left to the tree", 4, `{"v":1,"next":{"v":"x"}}`, false},
	{"nesting past the check's depth is left to the tree", 4, strings.Repeat(`{"v":1,"next":`, 40) + `null` + strings.Repeat(`}`, 40), false},

	{"a missing logical field with default fits", 5, `{"raw":"x","s":"y"}`, true},
	{"a logical field given is left to the tree", 5, `{"ts":0,"raw":"x","s":"y"}`, false},
}

func TestAvroCheck(t *testing.T) {
	for _, tc := range checkCases {
		t.Run(tc.name, func(t *testing.T) {
			typ := checkType(t, tc.schema)
			body := []byte(tc.json)
			tree := treeValidate(typ, body)
			if got := typ.Avro.check.fits(body); got != tc.fits {
				t.Errorf("check(schema %d).fits(%s) = %v, want %v (the tree says %v)", tc.schema, tc.json, got, tc.fits, tree)
			}
			if tc.fits && tree != nil {
				t.Errorf("check(schema %d) takes %s, which the tree refuses: %v", tc.schema, tc.json, tree)
			}
			if got := typ.ValidateJSON(body); fmt.Sprint(got) != fmt.Sprint(tree) {
				t.Errorf("ValidateJSON(%s) = %v, want the tree's %v", tc.json, got, tree)
			}
		})
	}
}

// TestAvroCheckLeavesErrorsAlone checks that an output the check does not
// take gets the tree's error, word for word.
func TestAvroCheckLeavesErrorsAlone(t *testing.T) {
	typ := checkType(t, 0)
	err := typ.ValidateJSON([]byte(`{"id":"d","n":1.5,"note":"x"}`))
	if want := "payload does not match type T0 at /n: want a whole number (an Avro long), got 1.5"; err == nil || err.Error() != want {
		t.Errorf("ValidateJSON(n: 1.5) = %v, want %q", err, want)
	}
	err = typ.ValidateJSON([]byte(`{"id":"d","n":1,"note":"x"} x`))
	if err == nil || !strings.HasPrefix(err.Error(), "payload is not JSON") {
		t.Errorf("ValidateJSON(trailing garbage) = %v, want payload is not JSON", err)
	}
}

// FuzzAvroCheck compares the check's verdict with the tree's on the same
// JSON: what the check takes, the tree must take, and ValidateJSON gives
// the tree's verdict and error every time (the tree reads an object's
// unknown keys and a map's values in key order, so its error is the same
// on every run).
func FuzzAvroCheck(f *testing.F) {
	for _, tc := range checkCases {
		f.Add(uint8(tc.schema), []byte(tc.json))
	}
	types := make([]*Type, len(checkSchemas))
	for i := range checkSchemas {
		types[i] = checkType(f, i)
	}
	f.Fuzz(func(t *testing.T, schema uint8, body []byte) {
		typ := types[int(schema)%len(types)]
		tree := treeValidate(typ, body)
		if typ.Avro.check.fits(body) && tree != nil {
			t.Fatalf("check(schema %d) takes %q, which the tree refuses: %v", int(schema)%len(types), body, tree)
		}
		if got := typ.ValidateJSON(body); (got == nil) != (tree == nil) || (got != nil && got.Error() != tree.Error()) {
			t.Fatalf("ValidateJSON(%q) = %v, want the tree's %v", body, got, tree)
		}
	})
}

// BenchmarkValidateAvroOutput validates the bench's 1 KiB record as a
// step's Avro output is checked before it is encoded.
func BenchmarkValidateAvroOutput(b *testing.B) {
	typ := checkType(b, 0)
	body := []byte(fmt.Sprintf(`{"id":"doc","n":42,"note":%q}`, strings.Repeat("x", 1000)))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := typ.ValidateJSON(body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAvroErrorsNameTheFirstKey: of several unknown keys, or several map
// values that do not fit, the error names the first in key order, the
// same on every run (Go's map order would give any of them).
func TestAvroErrorsNameTheFirstKey(t *testing.T) {
	doc, order := checkType(t, 0), checkType(t, 2)
	for range 20 {
		err := doc.ValidateJSON([]byte(`{"id":"d","n":1,"note":"x","zz":1,"mm":2,"aa":3}`))
		if err == nil || !strings.Contains(err.Error(), `no field "aa"`) {
			t.Fatalf("three unknown keys zz, mm, aa: %v; want the error to name aa", err)
		}
		err = order.ValidateJSON([]byte(`{"u":null,"lines":[],"tags":{"z":"x","c":"y","k":"w"}}`))
		if err == nil || !strings.Contains(err.Error(), "/tags/c") {
			t.Fatalf("three map values that are not doubles, z, c, k: %v; want the error at /tags/c", err)
		}
	}
}
