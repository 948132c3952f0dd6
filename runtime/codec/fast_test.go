package codec

import (
	"bytes"
	"testing"

	"github.com/hamba/avro/v2"

	"github.com/acemq/acemq-flow/spec"
)

const fastSchema = `{"type":"record","name":"R","fields":[
 {"name":"s","type":"string"},{"name":"b","type":"boolean"},{"name":"i","type":"int"},{"name":"l","type":"long"},
 {"name":"d","type":"double"},{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B","C"]}},
 {"name":"a","type":{"type":"array","items":["null","long",{"type":"record","name":"In","fields":[{"name":"z","type":"string"},{"name":"y","type":"E"}]}]}},
 {"name":"Cap","type":["null","string"]},{"name":"n","type":"null"}]}`

// general is the codec's general path: hamba/avro's generic decode, the
// JSON mapping, encoding/json.
func general(t testing.TB, c *Codec, s avro.Schema, payload []byte) ([]byte, bool) {
	native, err := c.unmarshal(s, payload)
	if err != nil {
		return nil, false
	}
	v, err := spec.AvroToJSON(s, native)
	if err != nil {
		return nil, false
	}
	return reference(t, v)
}

func TestFastDecodeCompiles(t *testing.T) {
	s := avro.MustParse(fastSchema)
	if compileFast(s, map[string]bool{}) == nil {
		t.Fatal("the schema of every supported type has no fast decoder")
	}
	for _, text := range []string{`{"type":"long","logicalType":"timestamp-millis"}`, `"bytes"`, `"float"`,
		`{"type":"map","values":"long"}`, `{"type":"fixed","name":"F","size":2}`,
		`{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}`} {
		if compileFast(avro.MustParse(text), map[string]bool{}) != nil {
			t.Errorf("schema %s has a fast decoder; it must be read the general way", text)
		}
	}
}

// FuzzFastDecode: whatever payload, the fast path either declines it or
// gives exactly the bytes of the general path, which then reads it too.
func FuzzFastDecode(f *testing.F) {
	s := avro.MustParse(fastSchema)
	c := New(nil, Options{MaxBytes: 1 << 12})
	fast := compileFast(s, map[string]bool{})
	seed, err := avro.Marshal(s, map[string]any{"s": "hi", "b": true, "i": -3, "l": int64(1) << 40, "d": 1e-9,
		"e": "B", "a": []any{nil, map[string]any{"long": int64(7)}, map[string]any{"In": map[string]any{"z": "q", "y": "C"}}},
		"Cap": map[string]any{"string": "x"}, "n": nil})
	if err != nil {
		f.Fatal(err)
	}
	if got, ok := fast.decode(nil, seed, c.opts.MaxBytes); !ok {
		f.Fatalf("the fast path declines a message of every supported type (% x)", seed)
	} else if want, _ := general(f, c, s, seed); !bytes.Equal(got, want) {
		f.Fatalf("fast path: %s; general path: %s", got, want)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)-1])
	f.Add(append(bytes.Clone(seed), 0))
	f.Fuzz(func(t *testing.T, payload []byte) {
		got, ok := fast.decode(nil, payload, c.opts.MaxBytes)
		if !ok {
			return
		}
		want, wok := general(t, c, s, payload)
		if !wok {
			t.Fatalf("fast path read % x as %s; the general path refuses it", payload, got)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("fast path read % x as %s; the general path as %s", payload, got, want)
		}
	})
}

func TestPlainBytes(t *testing.T) {
	for c := range 256 {
		for pos := range 11 {
			b := []byte("abcdefghijk")
			b[pos] = byte(c)
			want := c >= 0x20 && c < 0x7f && c != '"' && c != '\\'
			if got := plainBytes(b); got != want {
				t.Fatalf("plainBytes(%q) = %v, want %v", b, got, want)
			}
		}
	}
}
