package codec_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/test/testenv"
)

// flow loads one flow file whose types are given, keyed by name, as YAML
// values.
func flow(t testing.TB, name string, types map[string]string) *spec.Flow {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "version: acemq.flow/v1\nname: %s\ntypes:\n", name)
	for n, v := range types {
		fmt.Fprintf(&b, "  %s: %s\n", n, v)
	}
	set, err := spec.Load(fstest.MapFS{"f.yaml": {Data: []byte(b.String())}}, "f.yaml")
	if err != nil {
		t.Fatalf("Load(%s): %v", b.String(), err)
	}
	return set.Flows[0]
}

const (
	orderV1 = `{subject: shop.Order, avro: {type: record, name: Order, namespace: shop, fields: [{name: id, type: string}, {name: qty, type: int}]}}`
	// v2 adds a field with a default and widens qty to long: BACKWARD
	// compatible, so it reads what v1 wrote.
	orderV2 = `{subject: shop.Order, avro: {type: record, name: Order, namespace: shop, fields: [{name: id, type: string}, {name: qty, type: long}, {name: channel, type: string, default: web}]}}`
	// v3 adds a field without a default: it cannot read v1's data.
	orderV3 = `{subject: shop.Order, avro: {type: record, name: Order, namespace: shop, fields: [{name: id, type: string}, {name: qty, type: int}, {name: region, type: string}]}}`
)

func memStore(t testing.TB) *memory.Store {
	t.Helper()
	s, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// counting counts the registry calls that reach it.
type counting struct {
	codec.Registry
	register, lookup, byID atomic.Int32
	fail                   error // every call fails with it, when set
}

func (c *counting) RegisterSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error) {
	c.register.Add(1)
	if c.fail != nil {
		return stores.SchemaVersion{}, false, c.fail
	}
	return c.Registry.RegisterSchema(ctx, subject, typ, text)
}

func (c *counting) LookupSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error) {
	c.lookup.Add(1)
	if c.fail != nil {
		return stores.SchemaVersion{}, false, c.fail
	}
	return c.Registry.LookupSchema(ctx, subject, typ, text)
}

func (c *counting) SchemaByID(ctx context.Context, id int) (stores.Schema, bool, error) {
	c.byID.Add(1)
	if c.fail != nil {
		return stores.Schema{}, false, c.fail
	}
	return c.Registry.SchemaByID(ctx, id)
}

func TestEncodeThenDecodeRoundTripsTheJSON(t *testing.T) {
	ctx := t.Context()
	store := memStore(t)
	f := flow(t, "shop", map[string]string{"Order": orderV1})
	c := codec.New(store, codec.Options{})
	if err := c.Register(ctx, []*spec.Flow{f}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	v, ok, err := store.SchemaVersion(ctx, "shop.Order", stores.LatestVersion)
	if err != nil || !ok {
		t.Fatalf("Register did not register shop.Order: %v %v", ok, err)
	}
	in := `{"id":"o-1","qty":3}`
	body, id, err := c.Encode(ctx, f.Type("Order"), []byte(in))
	if err != nil {
		t.Fatalf("Encode(%s): %v", in, err)
	}
	if id != v.ID || body[0] != 0x00 || !bytes.Equal(body[1:5], []byte{0, 0, 0, byte(v.ID)}) {
		t.Errorf("Encode(%s) = % x (id %d), want the prefix 00 and id %d big-endian", in, body, id, v.ID)
	}
	if !codec.IsAvro("", body) || !codec.IsAvro(codec.ContentType, body) {
		t.Errorf("IsAvro of an encoded body is false")
	}
	out, gotID, err := c.Decode(ctx, f.Type("Order"), body)
	if err != nil {
		t.Fatalf("Decode(% x): %v", body, err)
	}
	if string(out) != in || gotID != v.ID {
		t.Errorf("Decode(Encode(%s)) = %s (id %d), want it back (id %d)", in, out, gotID, v.ID)
	}
}

func TestANewerCompatibleReaderReadsAnOldWritersMessage(t *testing.T) {
	ctx := t.Context()
	store := memStore(t)
	old := flow(t, "shop", map[string]string{"Order": orderV1})
	writer := codec.New(store, codec.Options{})
	if err := writer.Register(ctx, []*spec.Flow{old}); err != nil {
		t.Fatal(err)
	}
	body, oldID, err := writer.Encode(ctx, old.Type("Order"), []byte(`{"id":"o-1","qty":3}`))
	if err != nil {
		t.Fatal(err)
	}
	// A newer runtime, its own cache empty: it registers v2 and reads v1's
	// message by the id in its prefix.
	newer := flow(t, "shop", map[string]string{"Order": orderV2})
	reg := &counting{Registry: store}
	reader := codec.New(reg, codec.Options{})
	if err := reader.Register(ctx, []*spec.Flow{newer}); err != nil {
		t.Fatalf("Register(v2): %v", err)
	}
	for range 3 {
		out, id, err := reader.Decode(ctx, newer.Type("Order"), body)
		if err != nil {
			t.Fatalf("Decode(v1 message as v2): %v", err)
		}
		if want := `{"channel":"web","id":"o-1","qty":3}`; string(out) != want || id != oldID {
			t.Errorf("Decode(v1 message as v2) = %s (id %d), want %s (id %d)", out, id, want, oldID)
		}
	}
	if n := reg.byID.Load(); n != 1 {
		t.Errorf("3 decodes of one id asked the registry for it %d times, want once (cached)", n)
	}
	// And v2's own messages carry v2's id.
	body2, newID, err := reader.Encode(ctx, newer.Type("Order"), []byte(`{"id":"o-2","qty":4}`))
	if err != nil || newID == oldID {
		t.Fatalf("Encode(v2) = id %d, %v; want a new id beside %d", newID, err, oldID)
	}
	if out, _, err := reader.Decode(ctx, newer.Type("Order"), body2); err != nil || string(out) != `{"channel":"web","id":"o-2","qty":4}` {
		t.Errorf("Decode(v2 message) = %s, %v", out, err)
	}
	if n := reg.register.Load(); n != 1 {
		t.Errorf("Register and an Encode registered %d times, want once (cached)", n)
	}
}

func TestDecodeFailuresAreTypedAndFatal(t *testing.T) {
	ctx := t.Context()
	store := memStore(t)
	v1 := flow(t, "shop", map[string]string{"Order": orderV1})
	c := codec.New(store, codec.Options{})
	if err := c.Register(ctx, []*spec.Flow{v1}); err != nil {
		t.Fatal(err)
	}
	good, _, err := c.Encode(ctx, v1.Type("Order"), []byte(`{"id":"o-1","qty":3}`))
	if err != nil {
		t.Fatal(err)
	}
	// A subject of its own, NONE, so v3 registers though it cannot read v1.
	v3 := flow(t, "shop", map[string]string{"Order": strings.Replace(orderV3, "shop.Order", "shop.Order-v3", 1)})
	jsonID, _, err := store.RegisterSchema(ctx, "shop.json", stores.SchemaJSON, `{"type":"object"}`)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		reader *spec.Type
		body   []byte
		want   any // a pointer to the error type wanted
		says   string
	}{
		{"a body shorter than the prefix", v1.Type("Order"), []byte{0, 0, 1}, new(*codec.FrameError), "shorter than the 5-byte prefix"},
		{"a body without the magic byte", v1.Type("Order"), []byte(`{"id":1}`), new(*codec.FrameError), "starts with byte 0x7b"},
		{"schema id 0", v1.Type("Order"), []byte{0, 0, 0, 0, 0, 2}, new(*codec.FrameError), "schema id 0 is out of range"},
		{"an id the registry does not know", v1.Type("Order"), codec.AppendFrame(nil, 4242, good[5:]), new(*codec.UnknownSchemaError), "schema id 4242 is not in the schema registry"},
		{"an id naming a JSON Schema", v1.Type("Order"), codec.AppendFrame(nil, jsonID.ID, good[5:]), new(*codec.DecodeError), "is a JSON schema, not Avro"},
		{"a truncated Avro body", v1.Type("Order"), good[:len(good)-1], new(*codec.DecodeError), "decode the Avro message of schema id"},
		{"a writer that does not resolve to the reader", v3.Type("Order"), good, new(*codec.DecodeError), "does not resolve to the reader's"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := c.Decode(ctx, tc.reader, tc.body)
			if err == nil {
				t.Fatalf("Decode(% x) succeeded, want an error", tc.body)
			}
			if !errors.As(err, tc.want) || !codec.Fatal(err) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Decode(% x) = %T %v; want %T, fatal, saying %q", tc.body, err, err, tc.want, tc.says)
			}
		})
	}
	if _, _, err := c.Decode(ctx, nil, codec.AppendFrame(nil, 4242, nil)); !errors.Is(err, codec.ErrUnknownSchema) {
		t.Errorf("Decode(unknown id) = %v, want errors.Is ErrUnknownSchema", err)
	}
}

func TestDecodeWithoutAReaderTypeReadsByTheWritersSchema(t *testing.T) {
	ctx := t.Context()
	store := memStore(t)
	f := flow(t, "shop", map[string]string{"Order": orderV2})
	c := codec.New(store, codec.Options{})
	body, _, err := c.Encode(ctx, f.Type("Order"), []byte(`{"id":"o-1","qty":3}`))
	if err != nil {
		t.Fatalf("Encode before Register registers on the way: %v", err)
	}
	fresh := codec.New(store, codec.Options{})
	out, _, err := fresh.Decode(ctx, nil, body)
	if err != nil || string(out) != `{"channel":"web","id":"o-1","qty":3}` {
		t.Errorf("Decode(any) = %s, %v; want the writer's fields", out, err)
	}
}

func TestEncodeRefusesOutputThatDoesNotFitTheType(t *testing.T) {
	ctx := t.Context()
	f := flow(t, "shop", map[string]string{"Order": orderV1})
	reg := &counting{Registry: memStore(t)}
	c := codec.New(reg, codec.Options{})
	for _, in := range []string{`{"id":"o-1"}`, `{"id":"o-1","qty":"three"}`, `{"id":"o-1","qty":1,"extra":true}`, `not json`} {
		_, _, err := c.Encode(ctx, f.Type("Order"), []byte(in))
		var ee *codec.EncodeError
		if !errors.As(err, &ee) || !codec.Fatal(err) || ee.Subject != "shop.Order" {
			t.Errorf("Encode(%s) = %v, want a fatal *EncodeError naming subject shop.Order", in, err)
		}
	}
	if n := reg.register.Load(); n != 0 {
		t.Errorf("outputs that do not fit reached the registry %d times, want never", n)
	}
}

func TestReadOnlyRegisterNamesEveryMissingSubject(t *testing.T) {
	ctx := t.Context()
	store := memStore(t)
	f := flow(t, "shop", map[string]string{"Order": orderV1, "Invoice": `{avro: {type: record, name: Invoice, fields: [{name: n, type: long}]}}`, "Plain": `{type: object}`})
	reg := &counting{Registry: store}
	ro := codec.New(reg, codec.Options{ReadOnly: true})
	err := ro.Register(ctx, []*spec.Flow{f})
	var me *codec.MissingSchemasError
	if !errors.As(err, &me) || len(me.Missing) != 2 {
		t.Fatalf("Register(read-only, empty registry) = %v, want both Avro types missing", err)
	}
	for _, s := range []string{`subject "shop.Order"`, `subject "shop.Invoice"`, "--registry-readonly"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Register(read-only) = %q, want it to name %s", err, s)
		}
	}
	if reg.register.Load() != 0 {
		t.Errorf("a read-only codec registered a schema")
	}
	// Registered by someone else, the same schemas are found, and encode.
	if err := codec.New(store, codec.Options{}).Register(ctx, []*spec.Flow{f}); err != nil {
		t.Fatal(err)
	}
	if err := ro.Register(ctx, []*spec.Flow{f}); err != nil {
		t.Fatalf("Register(read-only) after registering: %v", err)
	}
	if _, _, err := ro.Encode(ctx, f.Type("Invoice"), []byte(`{"n":1}`)); err != nil {
		t.Errorf("Encode(read-only, registered): %v", err)
	}
}

func TestRegisterReportsAnIncompatibleTypeAndTheRegistryFailing(t *testing.T) {
	ctx := t.Context()
	store := memStore(t)
	if err := codec.New(store, codec.Options{}).Register(ctx, []*spec.Flow{flow(t, "shop", map[string]string{"Order": orderV1})}); err != nil {
		t.Fatal(err)
	}
	err := codec.New(store, codec.Options{}).Register(ctx, []*spec.Flow{flow(t, "shop", map[string]string{"Order": orderV3})})
	if !errors.Is(err, stores.ErrIncompatibleSchema) || !strings.Contains(err.Error(), "type Order of flow shop") {
		t.Errorf("Register(v3 after v1) = %v, want the incompatible schema named by its type", err)
	}
	down := errors.New("connection refused")
	c := codec.New(&counting{Registry: store, fail: down}, codec.Options{})
	f := flow(t, "shop", map[string]string{"Order": orderV1})
	if err := c.Register(ctx, []*spec.Flow{f}); !errors.Is(err, down) || codec.Fatal(err) {
		t.Errorf("Register(registry down) = %v, want the store's error, not fatal", err)
	}
	if _, _, err := c.Decode(ctx, f.Type("Order"), codec.AppendFrame(nil, 1, nil)); !errors.Is(err, down) || codec.Fatal(err) {
		t.Errorf("Decode(registry down) = %v, want the store's error, not fatal (a retry may succeed)", err)
	}
}

func TestReadFrame(t *testing.T) {
	cases := []struct {
		name string
		body []byte
		id   int
		rest string
		ok   bool
	}{
		{"the prefix alone is an empty payload", []byte{0, 0, 0, 0, 7}, 7, "", true},
		{"the id is big-endian", []byte{0, 1, 2, 3, 4, 'x'}, 0x01020304, "x", true},
		{"the largest id", []byte{0, 0x7f, 0xff, 0xff, 0xff}, 1<<31 - 1, "", true},
		{"an id past int32 is refused", []byte{0, 0x80, 0, 0, 0}, 0, "", false},
		{"empty", nil, 0, "", false},
		{"four bytes", []byte{0, 0, 0, 1}, 0, "", false},
		{"a JSON body", []byte(`{"a":1}`), 0, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, rest, err := codec.ReadFrame(tc.body)
			if (err == nil) != tc.ok || id != tc.id || string(rest) != tc.rest {
				t.Errorf("ReadFrame(% x) = %d, %q, %v; want %d, %q, ok %v", tc.body, id, rest, err, tc.id, tc.rest, tc.ok)
			}
		})
	}
}

func TestIsAvro(t *testing.T) {
	framed := codec.AppendFrame(nil, 1, []byte{2})
	cases := []struct {
		contentType string
		body        []byte
		want        bool
	}{
		{codec.ContentType, framed, true},
		{codec.ContentType + "; charset=binary", framed, true},
		{"application/json", framed, false},
		{"", framed, true},
		{"", []byte(`{"a":1}`), false},
		{"", []byte{0, 1}, false},
	}
	for _, tc := range cases {
		if got := codec.IsAvro(tc.contentType, tc.body); got != tc.want {
			t.Errorf("IsAvro(%q, % x) = %v, want %v", tc.contentType, tc.body, got, tc.want)
		}
	}
}

func FuzzReadAvroFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 2, 4})
	f.Add([]byte{0, 0x7f, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 0, 0, 0, 1})
	f.Add([]byte(`{"claim_check":"sha256:00"}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		id, payload, err := codec.ReadFrame(body)
		if err != nil {
			var fe *codec.FrameError
			if !errors.As(err, &fe) || fe.Len != len(body) || !codec.Fatal(err) {
				t.Fatalf("ReadFrame(% x) = %v, want a fatal *FrameError of the body's length", body, err)
			}
			return
		}
		if id < 1 || !bytes.Equal(codec.AppendFrame(nil, id, payload), body) {
			t.Fatalf("ReadFrame(% x) = %d, % x: framing them again does not give the body", body, id, payload)
		}
	})
}

func TestRegisterAndDecodeThroughPostgres(t *testing.T) {
	url := testenv.PostgresSchema(t)
	ctx := t.Context()
	open := func() *postgres.Store {
		s, err := postgres.Open(ctx, url, stores.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	v1 := flow(t, "shop", map[string]string{"Order": orderV1})
	c := codec.New(open(), codec.Options{})
	if err := c.Register(ctx, []*spec.Flow{v1}); err != nil {
		t.Fatalf("Register(postgres): %v", err)
	}
	body, id, err := c.Encode(ctx, v1.Type("Order"), []byte(`{"id":"o-1","qty":3}`))
	if err != nil {
		t.Fatal(err)
	}
	// Another replica, its own connection and cache, with the newer type.
	v2 := flow(t, "shop", map[string]string{"Order": orderV2})
	other := codec.New(open(), codec.Options{})
	if err := other.Register(ctx, []*spec.Flow{v2}); err != nil {
		t.Fatalf("Register(v2, postgres): %v", err)
	}
	out, gotID, err := other.Decode(ctx, v2.Type("Order"), body)
	if err != nil || gotID != id || string(out) != `{"channel":"web","id":"o-1","qty":3}` {
		t.Errorf("Decode(v1 message as v2, postgres) = %s (id %d), %v; want the default filled in (id %d)", out, gotID, err, id)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Errorf("Decode output is not JSON: %v", err)
	}
}
