package codec_test

import (
	"encoding/json"
	"testing"

	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/spec"
)

// FuzzDecode: whatever body arrives, Decode returns JSON or a fatal error
// naming the message, never a panic; what it returns encodes again.
func FuzzDecode(f *testing.F) {
	fl := flow(f, "shop", map[string]string{"Order": `{avro: {type: record, name: Order, fields: [
      {name: id, type: string}, {name: n, type: [null, long, {type: array, items: {type: map, values: double}}]},
      {name: d, type: {type: bytes, logicalType: decimal, precision: 9, scale: 2}}, {name: at, type: {type: long, logicalType: timestamp-micros}}]}}`})
	typ := fl.Type("Order")
	c := codec.New(memStore(f), codec.Options{MaxBytes: 1 << 16})
	if err := c.Register(f.Context(), []*spec.Flow{fl}); err != nil {
		f.Fatal(err)
	}
	body, _, err := c.Encode(f.Context(), typ, []byte(`{"id":"o","n":[{"a":1.5}],"d":"1.25","at":"2026-01-01T00:00:00.000001Z"}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(body)
	f.Add(body[:len(body)-3])
	f.Add([]byte{0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, body []byte) {
		out, _, err := c.Decode(t.Context(), typ, body)
		if err != nil {
			if !codec.Fatal(err) {
				t.Fatalf("Decode(% x) = %v: an error about the message must be fatal", body, err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Decode(% x) = %s, not JSON", body, out)
		}
		if _, _, err := c.Encode(t.Context(), typ, out); err != nil {
			t.Fatalf("Decode(% x) = %s, which does not encode again: %v", body, out, err)
		}
	})
}
