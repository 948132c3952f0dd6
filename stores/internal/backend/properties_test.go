package backend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/stores"
)

// decodeJSON is what DecodeProperties did before the flat reader, and
// still does for what that reader leaves: the reference.
func decodeJSON(b []byte) (stores.Properties, error) {
	var p stores.Properties
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	err := d.Decode(&p)
	return p, err
}

// Whatever the flat reader accepts, it reads as the JSON decoder does; what
// it leaves, DecodeProperties reads with the decoder.
func TestFlatPropertiesReadAsTheDecoderReadsThem(t *testing.T) {
	cases := []struct {
		in   string
		flat bool // the flat reader takes it
	}{
		{`{}`, true},
		{` { } `, true},
		{`{"message_id":"o-1"}`, true},
		{`{"message_id": "o-1", "correlation_id": "c", "reply_to": "r", "type": "t", "app_id": "a", "user_id": "u", "content_encoding": "gzip", "expiration": "60000", "priority": 9, "delivery_mode": 2, "timestamp": 1700000000}`, true},
		{"{\n\t\"message_id\" :\r\n \"o-1\" }\n", true},
		{`{"message_id":"a","message_id":"b"}`, true}, // the last wins, in both
		{`{"message_id":"ümlaut ✓"}`, true},
		{`{"priority":255}`, true},
		{`{"timestamp":0}`, true},
		{`{"message_id":"a\"b"}`, false},
		{`{"message_id":"a\u0041"}`, false},
		{`{"message_id":null}`, false},
		{`{"message_id":1}`, false},
		{`{"Message_ID":"case-insensitive in the decoder"}`, false},
		{`{"headers":{"n":1}}`, false},
		{`{"other":"unknown key"}`, false},
		{`{"priority":256}`, false},
		{`{"priority":-1}`, false},
		{`{"priority":"9"}`, false},
		{`{"delivery_mode":2.0}`, false},
		{`{"timestamp":1e9}`, false},
		{`{"timestamp":-5}`, false},
		{`{"timestamp":0012}`, false},
		{`{"timestamp":12345678901234567890}`, false},
		{`{"message_id":"a",}`, false},
		{`{"message_id":"a"} trailing`, false},
		{`{"message_id":"a"}{}`, false},
		{`{"message_id":"a"`, false},
		{`["message_id"]`, false},
		{"{\"message_id\":\"tab\there\"}", false},
		{"{\"message_id\":\"\xff\"}", false},
	}
	for _, c := range cases {
		flat, ok := decodeFlat([]byte(c.in))
		if ok != c.flat {
			t.Errorf("decodeFlat(%q) ok = %v, want %v", c.in, ok, c.flat)
		}
		want, wantErr := decodeJSON([]byte(c.in))
		if ok && (wantErr != nil || !reflect.DeepEqual(flat, want)) {
			t.Errorf("decodeFlat(%q) = %+v; the decoder reads %+v, %v", c.in, flat, want, wantErr)
		}
		got, err := DecodeProperties([]byte(c.in))
		if (err != nil) != (wantErr != nil) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Errorf("DecodeProperties(%q) = %+v, %v; the decoder reads %+v, %v", c.in, got, err, want, wantErr)
		}
	}
}

// Properties written by EncodeProperties, and spelt as PostgreSQL's jsonb
// output spells them, read back the same through either path.
func TestEncodedPropertiesReadBackTheSame(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune(`ab-_.:/ 09Zé✓`)
	escaped := []rune(`ab-_.:/ 09Zé✓"\<>&` + "\t")
	var letters []rune
	pick := func() string {
		var sb strings.Builder
		for range rng.IntN(12) {
			sb.WriteRune(letters[rng.IntN(len(letters))])
		}
		return sb.String()
	}
	flat := 0
	for i := range 2000 {
		// One record in three has characters the encoder escapes.
		letters = alphabet
		if i%3 == 0 {
			letters = escaped
		}
		p := stores.Properties{MessageID: pick(), CorrelationID: pick(), ReplyTo: pick(), Type: pick(), AppID: pick(),
			UserID: pick(), ContentEncoding: pick(), Expiration: fmt.Sprint(rng.IntN(100000)),
			Priority: uint8(rng.IntN(256)), DeliveryMode: uint8(rng.IntN(3)), Timestamp: rng.Int64N(1 << 40)}
		if i%10 == 0 {
			p.Headers = map[string]any{"k": pick(), "n": json.Number(fmt.Sprint(rng.IntN(1000)))}
		}
		b, err := EncodeProperties(p)
		if err != nil {
			t.Fatal(err)
		}
		// jsonb's text form: a space after each colon and comma.
		spaced := bytes.ReplaceAll(bytes.ReplaceAll(b, []byte(`":`), []byte(`": `)), []byte(`,"`), []byte(`, "`))
		for _, in := range [][]byte{b, spaced} {
			want, err := decodeJSON(in)
			if err != nil {
				t.Fatalf("decoder on %s: %v", in, err)
			}
			got, err := DecodeProperties(in)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("DecodeProperties(%s) = %+v, %v; want %+v", in, got, err, want)
			}
			if _, ok := decodeFlat(in); ok {
				flat++
			}
		}
	}
	// Most carry no escape: the flat reader must have taken some.
	if flat == 0 {
		t.Fatal("the flat reader took none of the encoded properties")
	}
}

func BenchmarkDecodeProperties(b *testing.B) {
	in := []byte(`{"message_id": "o-12345", "correlation_id": "c-1", "delivery_mode": 2}`)
	for b.Loop() {
		if _, err := DecodeProperties(in); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzFlatProperties checks that whatever the flat reader accepts, the
// decoder reads the same (go test -fuzz FuzzFlatProperties).
func FuzzFlatProperties(f *testing.F) {
	for _, s := range []string{`{}`, `{"message_id": "o-1", "priority": 9}`, `{"timestamp":12}`, `{"headers":{}}`, `{"type":"a\"b"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		flat, ok := decodeFlat(in)
		if !ok {
			return
		}
		want, err := decodeJSON(in)
		if err != nil || !reflect.DeepEqual(flat, want) {
			t.Fatalf("decodeFlat(%q) = %+v; the decoder reads %+v, %v", in, flat, want, err)
		}
	})
}

// A record RabbitMQ would refuse by closing the relay's channel is refused
// at Add, and a row another program wrote so reads as unreadable (failed
// with the reason, then stuck) rather than as a publish that fails every
// other one in flight at every lease.
func TestPropertiesRabbitMQRefusesAreRefused(t *testing.T) {
	long := strings.Repeat("k", 256)
	for _, p := range []stores.Properties{
		{Expiration: "soon"}, {Expiration: "-1"}, {Expiration: "1.5"}, {MessageID: long},
		{Headers: map[string]any{long: 1}}, {Headers: map[string]any{"a": []any{map[string]any{long: 1}}}},
	} {
		if err := CheckRecord(stores.OutboxRecord{RoutingKey: "q", Properties: p}); err == nil {
			t.Errorf("CheckRecord with %+v = nil, want a refusal", p)
		}
	}
	if err := CheckRecord(stores.OutboxRecord{RoutingKey: "q", Properties: stores.Properties{Expiration: "4294967296", MessageID: strings.Repeat("m", 255)}}); err != nil {
		t.Errorf("CheckRecord with a long but valid expiration and a 255-byte id = %v", err)
	}
	if _, err := DecodeProperties([]byte(`{"message_id": "m-1", "expiration": "soon"}`)); err == nil || !strings.Contains(err.Error(), "milliseconds") {
		t.Errorf("DecodeProperties with expiration soon = %v, want an error naming milliseconds", err)
	}
}
