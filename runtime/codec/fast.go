package codec

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"

	"github.com/hamba/avro/v2"

	"github.com/acemq/acemq-flow/internal/jsonscan"
)

// fastDecoder reads Avro binary of one schema straight to the JSON a
// handler sees (the same bytes spec.AvroToJSON and encoding/json give),
// with no tree in between. It is compiled for schemas of nulls, booleans,
// ints, longs, doubles, strings, enums, records, arrays and unions of
// these, without logical types; any other schema has none (nil). A body
// it cannot read as simply (a string needing a JSON escape, a non-finite
// double, data that does not read, bytes left over) makes decode report
// false, and the codec reads the message the general way, which gives the
// answer or the error.
type fastDecoder struct {
	kind    avro.Type
	items   *fastDecoder   // array
	symbols []string       // enum
	fields  []*fastDecoder // record, in the schema's order
	keys    [][]byte       // record: `"name":` by field
	sorted  []int          // record: field indexes in the order of their names
	union   []*fastDecoder // union branches
}

// compileFast returns s's fast decoder, or nil when s has a type it does
// not read; seen breaks recursion (a recursive record has none).
func compileFast(s avro.Schema, seen map[string]bool) *fastDecoder {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		return nil
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		return &fastDecoder{kind: avro.Null}
	case *avro.PrimitiveSchema:
		switch t := s.Type(); t {
		case avro.Boolean, avro.Int, avro.Long, avro.Double, avro.String:
			return &fastDecoder{kind: t}
		}
	case *avro.EnumSchema:
		return &fastDecoder{kind: avro.Enum, symbols: s.Symbols()}
	case *avro.ArraySchema:
		if it := compileFast(s.Items(), seen); it != nil {
			return &fastDecoder{kind: avro.Array, items: it}
		}
	case *avro.UnionSchema:
		d := &fastDecoder{kind: avro.Union}
		for _, t := range s.Types() {
			b := compileFast(t, seen)
			if b == nil {
				return nil
			}
			d.union = append(d.union, b)
		}
		return d
	case *avro.RecordSchema:
		if seen[s.FullName()] {
			return nil
		}
		seen[s.FullName()] = true
		defer delete(seen, s.FullName())
		d := &fastDecoder{kind: avro.Record}
		names := make([]string, len(s.Fields()))
		for i, f := range s.Fields() {
			fd := compileFast(f.Type(), seen)
			if fd == nil {
				return nil
			}
			for _, c := range []byte(f.Name()) {
				if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
					return nil
				}
			}
			d.fields = append(d.fields, fd)
			d.keys = append(d.keys, []byte(strconv.Quote(f.Name())+":"))
			names[i] = f.Name()
			d.sorted = append(d.sorted, i)
		}
		slices.SortStableFunc(d.sorted, func(a, b int) int {
			switch {
			case names[a] < names[b]:
				return -1
			case names[a] > names[b]:
				return 1
			}
			return 0
		})
		return d
	}
	return nil
}

// decode reads one whole payload as JSON appended to dst; false when the
// payload is not for this fast path (see fastDecoder).
func (d *fastDecoder) decode(dst, payload []byte, maxBytes int) ([]byte, bool) {
	r := fastReader{buf: payload, max: maxBytes}
	out, ok := d.value(dst, &r, 0)
	return out, ok && r.pos == len(payload)
}

type fastReader struct {
	buf []byte
	pos int
	max int
}

func (r *fastReader) long() (int64, bool) {
	u, n := binary.Uvarint(r.buf[r.pos:])
	if n <= 0 {
		return 0, false
	}
	r.pos += n
	return int64(u>>1) ^ -int64(u&1), true
}

// maxDepth bounds nesting (arrays of unions of records…) on the fast
// path; deeper data is read the general way.
const maxDepth = 64

func (d *fastDecoder) value(dst []byte, r *fastReader, depth int) ([]byte, bool) {
	if depth > maxDepth {
		return dst, false
	}
	switch d.kind {
	case avro.Null:
		return append(dst, "null"...), true
	case avro.Boolean:
		if r.pos >= len(r.buf) || r.buf[r.pos] > 1 {
			return dst, false
		}
		r.pos++
		return strconv.AppendBool(dst, r.buf[r.pos-1] == 1), true
	case avro.Int:
		v, ok := r.long()
		if !ok || v < math.MinInt32 || v > math.MaxInt32 {
			return dst, false
		}
		return strconv.AppendInt(dst, v, 10), true
	case avro.Long:
		v, ok := r.long()
		if !ok {
			return dst, false
		}
		return strconv.AppendInt(dst, v, 10), true
	case avro.Double:
		if len(r.buf)-r.pos < 8 {
			return dst, false
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(r.buf[r.pos:]))
		r.pos += 8
		return appendFloat(dst, f)
	case avro.String:
		n, ok := r.long()
		if !ok || n < 0 || n > int64(r.max) || n > int64(len(r.buf)-r.pos) {
			return dst, false
		}
		s := r.buf[r.pos : r.pos+int(n)]
		r.pos += int(n)
		if !plainBytes(s) {
			return dst, false
		}
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"'), true
	case avro.Enum:
		i, ok := r.long()
		if !ok || i < 0 || i >= int64(len(d.symbols)) {
			return dst, false
		}
		dst = append(dst, '"')
		dst = append(dst, d.symbols[i]...)
		return append(dst, '"'), true
	case avro.Union:
		i, ok := r.long()
		if !ok || i < 0 || i >= int64(len(d.union)) {
			return dst, false
		}
		return d.union[i].value(dst, r, depth+1)
	case avro.Array:
		dst = append(dst, '[')
		first := true
		for {
			n, ok := r.long()
			if !ok {
				return dst, false
			}
			if n == 0 {
				break
			}
			if n < 0 {
				if n == math.MinInt64 {
					return dst, false
				}
				n = -n
				if _, ok := r.long(); !ok { // the block's size in bytes
					return dst, false
				}
			}
			// Every item takes at least one byte but null's: a count past
			// what is left (or MaxBytes) is read the general way, which
			// bounds it.
			if n > int64(r.max) || (d.items.kind != avro.Null && n > int64(len(r.buf)-r.pos)) {
				return dst, false
			}
			for range n {
				if !first {
					dst = append(dst, ',')
				}
				first = false
				if dst, ok = d.items.value(dst, r, depth+1); !ok {
					return dst, false
				}
			}
		}
		return append(dst, ']'), true
	case avro.Record:
		// The fields are read in the schema's order after dst, then
		// written again in their names' order (as encoding/json sorts an
		// object's keys), and moved down.
		start := len(dst)
		var small [16][2]int
		spans := small[:0]
		for _, f := range d.fields {
			a := len(dst)
			var ok bool
			if dst, ok = f.value(dst, r, depth+1); !ok {
				return dst, false
			}
			spans = append(spans, [2]int{a, len(dst)})
		}
		mid := len(dst)
		dst = append(dst, '{')
		for j, i := range d.sorted {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, d.keys[i]...)
			dst = append(dst, dst[spans[i][0]:spans[i][1]]...)
		}
		dst = append(dst, '}')
		n := copy(dst[start:], dst[mid:])
		return dst[:start+n], true
	}
	return dst, false
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainBytes reports whether s needs no escape in JSON and is written by
// encoding/json as itself: printable ASCII other than '"' and '\\' (DEL
// included), checked eight bytes at a time.
func plainBytes(s []byte) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := binary.LittleEndian.Uint64(s[i:])
		del := w ^ (ones * 0x7f)
		if jsonscan.Special8(w) || (del-ones)&^del&highs != 0 {
			return false
		}
	}
	for _, c := range s[i:] {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
