package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// avroLaterFlow has a pipeline whose input type is Avro and whose one step
// waits to be started, so that what reaches its queue can be read.
const avroLaterFlow = `version: acemq.flow/v1
name: avl
types:
  Order: {avro: {type: record, name: Order, fields: [{name: id, type: string}, {name: qty, type: int}]}}
plugins:
  k: {command: ./not-started}
pipelines:
  - name: avl
    input: Order
    steps:
      - {name: a, handler: k.a, auto_startup: false}
`

// TestPublishInEncodesAnAvroInputType: a program that embeds the runtime
// and publishes JSON through PublishIn to a step whose input type is Avro
// gets it there as Avro, in the Confluent framing with the id the registry
// has for the type, as send writes it: found by the destination, or by
// the type the message names. A body that does not fit the type is
// refused, naming the type, and nothing is published.
func TestPublishInEncodesAnAvroInputType(t *testing.T) {
	url := testenv.VHost(t)
	reg := memRegistry(t)
	rt, _ := runtimetest.Start(t, url, avroLaterFlow, runtime.Options{Registry: reg, Delays: true, LadderUnit: 10 * time.Millisecond})
	vs, err := reg.SubjectVersions(t.Context(), "avl.Order", false)
	if err != nil || len(vs) != 1 {
		t.Fatalf("the runtime registered %d versions of avl.Order (%v), want 1", len(vs), err)
	}
	v := vs[0]
	ch := testenv.ConfirmedChannel(t, url)
	for _, m := range []decide.Message{
		{Exchange: "avl", RoutingKey: "a", MessageID: "by-destination", ContentType: "application/json", Body: []byte(`{"id":"o-1","qty":2}`)},
		{Exchange: "", RoutingKey: "avl.a", MessageID: "by-type", Type: "Order", Body: []byte(`{"id":"o-2","qty":3}`)},
	} {
		if err := rt.PublishIn(t.Context(), m, 0); err != nil {
			t.Fatalf("PublishIn(%s): %v", m.MessageID, err)
		}
		var body []byte
		testenv.Eventually(t, 30*time.Second, func() error {
			d, ok, err := ch.Get("avl.a", true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return testenv.Errorf("avl.a is empty")
			}
			id, _, ferr := codec.ReadFrame(d.Body)
			if d.MessageId != m.MessageID || d.ContentType != codec.ContentType || ferr != nil || id != v.ID || d.Headers[codec.HeaderSchemaID] != codec.HeaderValue(v.ID) {
				t.Fatalf("avl.a holds message %s with content type %q, header %v, frame id %d (%v); want %s as Avro with id %d",
					d.MessageId, d.ContentType, d.Headers[codec.HeaderSchemaID], id, ferr, m.MessageID, v.ID)
			}
			body = d.Body
			return nil
		})
		js, _, err := codec.New(reg, codec.Options{}).Decode(t.Context(), nil, body)
		if err != nil || string(js) != string(m.Body) {
			t.Fatalf("%s decodes to %s (%v), want %s", m.MessageID, js, err, m.Body)
		}
	}

	err = rt.PublishIn(t.Context(), decide.Message{Exchange: "avl", RoutingKey: "a", MessageID: "unfit", ContentType: "application/json", Body: []byte(`{"id":"o-3"}`)}, 0)
	if err == nil || !strings.Contains(err.Error(), "does not fit Avro type Order") {
		t.Fatalf("PublishIn of an Order without qty: %v; want an error saying it does not fit Avro type Order", err)
	}
	if q, err := ch.QueueDeclarePassive("avl.a", true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Fatalf("avl.a holds %d messages (%v) after a refused PublishIn, want 0", q.Messages, err)
	}
}
