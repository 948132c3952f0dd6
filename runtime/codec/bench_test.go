package codec_test

import (
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/spec"
)

// BenchmarkDecodeEncode is one hop's codec work per message, registry
// lookups cached: decode an Avro message to the handler's JSON, encode the
// handler's JSON output back to Avro.
func BenchmarkDecodeEncode(b *testing.B) {
	ctx := b.Context()
	f := flow(b, "shop", map[string]string{"Order": `{avro: {type: record, name: Order, namespace: shop, fields: [
      {name: id, type: string}, {name: qty, type: int}, {name: total, type: {type: bytes, logicalType: decimal, precision: 12, scale: 2}},
      {name: placed_at, type: {type: long, logicalType: timestamp-millis}}, {name: coupon, type: [null, string], default: null},
      {name: lines, type: {type: array, items: {type: record, name: Line, fields: [{name: sku, type: string}, {name: qty, type: int}]}}}]}}`})
	typ := f.Type("Order")
	c := codec.New(memStore(b), codec.Options{})
	if err := c.Register(ctx, []*spec.Flow{f}); err != nil {
		b.Fatal(err)
	}
	in := []byte(`{"id":"o-1","qty":3,"total":"129.90","placed_at":"2026-12-02T07:00:45.123Z","coupon":null,` +
		`"lines":[{"sku":"a-1","qty":1},{"sku":"b-2","qty":2},{"sku":"c-3","qty":3}]}`)
	body, _, err := c.Encode(ctx, typ, in)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		js, _, err := c.Decode(ctx, typ, body)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.Encode(ctx, typ, js); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeEncodeDoc is BenchmarkDecodeEncode for the message of
// test/bench's hop-avro: a record of a string, a long and a 1,000-byte
// string, without logical types.
func BenchmarkDecodeEncodeDoc(b *testing.B) {
	ctx := b.Context()
	f := flow(b, "bench", map[string]string{"Doc": `{avro: {type: record, name: Doc, fields: [{name: id, type: string}, {name: n, type: long}, {name: note, type: string}]}}`})
	typ := f.Type("Doc")
	c := codec.New(memStore(b), codec.Options{})
	if err := c.Register(ctx, []*spec.Flow{f}); err != nil {
		b.Fatal(err)
	}
	in := []byte(`{"id":"doc","n":42,"note":"` + strings.Repeat("x", 1000) + `"}`)
	body, _, err := c.Encode(ctx, typ, in)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		js, _, err := c.Decode(ctx, typ, body)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.Encode(ctx, typ, js); err != nil {
			b.Fatal(err)
		}
	}
}
