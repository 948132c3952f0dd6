package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/stores/storeurl"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// avroFlow has a pipeline whose input and output types are Avro: Order
// (v2: channel added with a default) in, Priced out; ship waits to be
// started, so that what sits in its queue can be read.
const avroFlow = `version: acemq.flow/v1
name: av
defaults:
  retry: {max_attempts: 2, initial_delay: 100ms, max_delay: 100ms, jitter: 0}
types:
  Order: {avro: {type: record, name: Order, fields: [{name: id, type: string}, {name: qty, type: int}, {name: channel, type: string, default: web}]}}
  Priced: {avro: {type: record, name: Priced, fields: [{name: id, type: string}, {name: total, type: long}]}}
plugins:
  k: {command: ./not-started}
pipelines:
  - name: av
    input: Order
    steps:
      - {name: price, handler: k.price, output: Priced}
      - {name: ship, handler: k.ship, output: Priced, auto_startup: false}
`

// orderV1 is Order as an older writer had it: without channel.
const orderV1 = `{"type":"record","name":"Order","fields":[{"name":"id","type":"string"},{"name":"qty","type":"int"}]}`

func memRegistry(t *testing.T) stores.Schemas { return memStore(t) }

// memStore is a memory store (registry, schedules, outbox) closed when
// the test ends.
func memStore(t *testing.T) *memory.Store {
	t.Helper()
	s, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func postgresRegistry(t *testing.T) stores.Schemas {
	t.Helper()
	s, err := storeurl.Open(t.Context(), testenv.PostgresSchema(t), stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAvroPipelineOnTheWire: a two-step pipeline with Avro input and
// output types. The first message is written by an older writer (Order v1,
// registered before the runtime starts); the handler of price sees it as
// JSON resolved to the flow's Order v2 (channel takes its default); what
// price returns sits in ship's queue as Confluent-framed Avro with the id
// the registry has for Priced; ship's handler sees JSON again. Run on the
// memory registry and on PostgreSQL.
func TestAvroPipelineOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		reg  func(t *testing.T) stores.Schemas
	}{
		{"memory", memRegistry},
		{"postgres", postgresRegistry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := testenv.VHost(t)
			reg := tc.reg(t)
			v1, _, err := reg.RegisterSchema(t.Context(), "av.Order", stores.SchemaAvro, orderV1)
			if err != nil {
				t.Fatal(err)
			}
			priced := make(chan []byte, 1)
			shipped := make(chan []byte, 1)
			handlers := map[string]runtime.HandlerFunc{
				"k.price": func(_ context.Context, req runtime.Request) (decide.Result, error) {
					priced <- req.Payload
					var o struct {
						ID  string `json:"id"`
						Qty int    `json:"qty"`
					}
					if err := json.Unmarshal(req.Payload, &o); err != nil {
						return decide.Result{}, errors.Join(decide.ErrFatal, err)
					}
					out, _ := json.Marshal(map[string]any{"id": o.ID, "total": o.Qty * 250})
					return decide.Result{Payload: out}, nil
				},
				"k.ship": func(_ context.Context, req runtime.Request) (decide.Result, error) {
					shipped <- req.Payload
					return decide.Result{Payload: req.Payload}, nil
				},
			}
			rt, pl := runtimetest.Start(t, url, avroFlow, runtime.Options{Registry: reg, Handlers: handlers})
			ch := testenv.ConfirmedChannel(t, url)

			body := codec.AppendFrame(nil, v1.ID, avroV1Order("o-1", 3))
			if err := ch.PublishWithContext(t.Context(), "av", "price", true, false, amqp.Publishing{
				MessageId: "m-1", ContentType: codec.ContentType, Body: body,
				Headers: amqp.Table{"x-acemq-route": "price,ship", "x-acemq-route-position": int64(0)},
			}); err != nil {
				t.Fatal(err)
			}
			if got := receive(t, priced); string(got) != `{"channel":"web","id":"o-1","qty":3}` {
				t.Fatalf("price's handler got %s, want the v1 message as JSON resolved to Order v2 (channel: web)", got)
			}

			// What price published, in ship's queue: Avro, by Priced's id.
			d := getOne(t, ch, "av.ship")
			pricedV, ok, err := reg.LookupSchema(t.Context(), "av.Priced", stores.SchemaAvro, pl.Consumers[0].File.Type("Priced").Avro.Text)
			if err != nil || !ok {
				t.Fatalf("LookupSchema(av.Priced) = %v, %v; want the schema the runtime registered at start", ok, err)
			}
			id, _, err := codec.ReadFrame(d.Body)
			if err != nil || id != pricedV.ID || d.ContentType != codec.ContentType || d.Headers[codec.HeaderSchemaID] != codec.HeaderValue(pricedV.ID) {
				t.Fatalf("ship's queue holds content type %q, header %v, frame id %d (%v); want %s, Confluent framing with Priced's id %d",
					d.ContentType, d.Headers[codec.HeaderSchemaID], id, err, codec.ContentType, pricedV.ID)
			}
			js, _, err := codec.New(reg, codec.Options{}).Decode(t.Context(), nil, d.Body)
			if err != nil || string(js) != `{"id":"o-1","total":750}` {
				t.Fatalf("the Avro in ship's queue decodes to %s (%v), want price's output", js, err)
			}
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
			if err := rt.Start(t.Context(), "av.ship"); err != nil {
				t.Fatal(err)
			}
			if got := receive(t, shipped); string(got) != `{"id":"o-1","total":750}` {
				t.Fatalf("ship's handler got %s, want price's output as JSON", got)
			}

			// send's first message: encoded by the runtime with Order v2's id.
			first, err := decide.FirstMessage(pl, decide.Target{Pipeline: "av"}, []byte(`{"id":"o-2","qty":1,"channel":"shop"}`), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if first, err = rt.EncodeFirst(t.Context(), decide.Target{Pipeline: "av"}, first); err != nil {
				t.Fatal(err)
			}
			if _, _, err := codec.ReadFrame(first.Body); err != nil || first.ContentType != codec.ContentType {
				t.Fatalf("EncodeFirst gave content type %q and a body that is not framed (%v), want Avro", first.ContentType, err)
			}
			// send without PATH: the admin API answers the message encoded.
			viaAdmin, err := admin.NewClient(runtimetest.Admin(t, rt, pl, ""), "").FirstMessage(t.Context(), decide.Target{Pipeline: "av"}, []byte(`{"id":"o-2","qty":1,"channel":"shop"}`))
			if err != nil {
				t.Fatal(err)
			}
			if id, _, err := codec.ReadFrame(viaAdmin.Body); err != nil || viaAdmin.ContentType != codec.ContentType || viaAdmin.Headers[codec.HeaderSchemaID] != codec.HeaderValue(id) {
				t.Fatalf("POST /v1/messages/first answered content type %q, header %v, a body framed %v; want Avro", viaAdmin.ContentType, viaAdmin.Headers[codec.HeaderSchemaID], err)
			}
			m := wire.Publishing(first)
			if err := ch.PublishWithContext(t.Context(), m.Exchange, m.RoutingKey, true, false, m.Publishing); err != nil {
				t.Fatal(err)
			}
			if got := receive(t, priced); string(got) != `{"channel":"shop","id":"o-2","qty":1}` {
				t.Fatalf("price's handler got %s for send's first message, want its JSON", got)
			}
			if got := receive(t, shipped); string(got) != `{"id":"o-2","total":250}` {
				t.Fatalf("ship's handler got %s, want price's output as JSON", got)
			}
		})
	}
}

// TestAvroUnknownSchemaIDIsDeadLettered: a message whose frame names an id
// the registry does not know is dead-lettered at once, as it arrived, its
// reason naming the id and the queue; the handler never runs, and the
// consumer goes on with the next message.
func TestAvroUnknownSchemaIDIsDeadLettered(t *testing.T) {
	url := testenv.VHost(t)
	called := make(chan []byte, 2)
	handlers := map[string]runtime.HandlerFunc{"k.price": func(_ context.Context, req runtime.Request) (decide.Result, error) {
		called <- req.Payload
		return decide.Result{Payload: []byte(`{"id":"x","total":1}`)}, nil
	}}
	runtimetest.Start(t, url, avroFlow, runtime.Options{Registry: memRegistry(t), Handlers: handlers})
	ch := testenv.ConfirmedChannel(t, url)
	body := codec.AppendFrame(nil, 4242, avroV1Order("o-2", 1))
	if err := ch.PublishWithContext(t.Context(), "", "av.price", true, false, amqp.Publishing{
		MessageId: "unknown-id", ContentType: codec.ContentType, Body: body}); err != nil {
		t.Fatal(err)
	}
	d := getOne(t, ch, "av.price.dlq")
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	reason, _ := d.Headers["x-acemq-error"].(string)
	if d.MessageId != "unknown-id" || d.Headers["x-acemq-error-kind"] != decide.KindFatal ||
		!strings.Contains(reason, "schema id 4242") || !strings.Contains(reason, `queue "av.price"`) {
		t.Fatalf(".dlq holds %s with kind %v, reason %q; want unknown-id, fatal, naming schema id 4242 and queue av.price", d.MessageId, d.Headers["x-acemq-error-kind"], reason)
	}
	if string(d.Body) != string(body) || d.ContentType != codec.ContentType {
		t.Fatalf("the dead letter's body is %q (%s), want the Avro it arrived with", d.Body, d.ContentType)
	}
	select {
	case p := <-called:
		t.Fatalf("the handler ran on %s; an undecodable message must not reach it", p)
	default:
	}
	// Plain JSON still reads: the consumer is alive and decodes nothing.
	if err := ch.PublishWithContext(t.Context(), "", "av.price", true, false, amqp.Publishing{
		MessageId: "json", ContentType: "application/json", Body: []byte(`{"id":"o-3","qty":2}`)}); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, called); string(got) != `{"id":"o-3","qty":2}` {
		t.Fatalf("the handler got %s after the dead letter, want the JSON message", got)
	}
}

// TestAvroReadOnlyRegistryMissingSchemaStopsTheStart: with
// RegistryReadOnly, a registry that lacks a type's schema stops Run before
// any consumer starts, naming each missing subject and how to fix it;
// nothing is registered.
func TestAvroReadOnlyRegistryMissingSchemaStopsTheStart(t *testing.T) {
	url := testenv.VHost(t)
	reg := memRegistry(t)
	pl := compileText(t, avroFlow)
	// Order is there; Priced is not.
	if _, _, err := reg.RegisterSchema(t.Context(), "av.Order", stores.SchemaAvro, pl.Consumers[0].File.Type("Order").Avro.Text); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(pl, runtime.Options{AMQPURL: url, Registry: reg, RegistryReadOnly: true,
		Handlers: map[string]runtime.HandlerFunc{"k.price": runtimetest.Echo, "k.ship": runtimetest.Echo}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = rt.Run(ctx)
	var missing *codec.MissingSchemasError
	if !errors.As(err, &missing) || len(missing.Missing) != 1 || missing.Missing[0].Subject != "av.Priced" ||
		!strings.Contains(err.Error(), `subject "av.Priced"`) || !strings.Contains(err.Error(), "--registry-readonly") {
		t.Fatalf("Run(read-only, Priced missing) = %v; want a MissingSchemasError naming subject av.Priced and --registry-readonly", err)
	}
	select {
	case <-rt.Started():
		t.Fatal("the runtime started its consumers with a schema missing")
	default:
	}
	if subjects, err := reg.Subjects(t.Context(), false); err != nil || len(subjects) != 1 {
		t.Fatalf("the read-only start left subjects %v (%v), want only av.Order", subjects, err)
	}
}

// avroV1Order is Order v1's Avro binary of id and qty: a string is its
// zig-zag length then its bytes, an int its zig-zag varint.
func avroV1Order(id string, qty int) []byte {
	out := []byte{byte(len(id) << 1)}
	out = append(out, id...)
	return append(out, byte(qty<<1))
}

func receive(t *testing.T, c <-chan []byte) []byte {
	t.Helper()
	select {
	case b := <-c:
		return b
	case <-time.After(30 * time.Second):
		t.Fatal("no call of the handler within 30s")
		return nil
	}
}

// getOne waits for a message in queue and returns it unacknowledged.
func getOne(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	var got amqp.Delivery
	testenv.Eventually(t, 30*time.Second, func() error {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return err
		}
		if !ok {
			return testenv.Errorf("%s is empty", queue)
		}
		got = d
		return nil
	})
	return got
}
