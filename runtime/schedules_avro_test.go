package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

const avroScheduleFlow = avroLaterFlow + `schedules:
  - {name: tick, every: 1s, send: {pipeline: avl, payload: {id: t-1, qty: 1}}}
`

// TestAScheduleFiresAvroToAnAvroInputType: a schedule's firing to a
// pipeline whose input type is Avro is written to the outbox as Avro, in
// the Confluent framing with the id the registry has for the type, the
// bytes the relay publishes as they are; before, it was the payload's JSON.
func TestAScheduleFiresAvroToAnAvroInputType(t *testing.T) {
	url := testenv.VHost(t)
	st := memStore(t)
	runtimetest.Start(t, url, avroScheduleFlow, runtime.Options{Registry: st, Schedules: st})
	var rec stores.OutboxRecord
	testenv.Eventually(t, 30*time.Second, func() error {
		recs, err := st.ListPending(t.Context(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			return testenv.Errorf("the schedule has not fired yet")
		}
		rec = recs[0]
		return nil
	})
	vs, err := st.SubjectVersions(t.Context(), "avl.Order", false)
	if err != nil || len(vs) != 1 {
		t.Fatalf("the runtime registered %d versions of avl.Order (%v), want 1", len(vs), err)
	}
	id, _, ferr := codec.ReadFrame(rec.Body)
	if rec.ContentType != codec.ContentType || ferr != nil || id != vs[0].ID || rec.Properties.Headers[codec.HeaderSchemaID] != codec.HeaderValue(id) {
		t.Fatalf("the firing's outbox record has content type %q, header %v, frame id %d (%v), body %q; want Avro with id %d",
			rec.ContentType, rec.Properties.Headers[codec.HeaderSchemaID], id, ferr, rec.Body, vs[0].ID)
	}
	js, _, err := codec.New(st, codec.Options{}).Decode(t.Context(), nil, rec.Body)
	if err != nil || string(js) != `{"id":"t-1","qty":1}` {
		t.Fatalf("the firing decodes to %s (%v), want the schedule's payload", js, err)
	}
}

// TestAScheduleWhosePayloadDoesNotFitItsAvroTypeIsRefused: a payload that
// does not fit the Avro input of the queue a schedule's exchange and
// routing key reach could never be encoded at any tick, so the runtime
// refuses the plan at New, naming the schedule, where it is and the type,
// instead of trying each tick again for ever. (A schedule sending to a
// pipeline has its payload checked against the pipeline's input when the
// plan is compiled.)
func TestAScheduleWhosePayloadDoesNotFitItsAvroTypeIsRefused(t *testing.T) {
	flow := avroLaterFlow + `schedules:
  - {name: broken, every: 1s, send: {exchange: avl, routing_key: a, payload: {id: t-1, qty: many}}}
`
	st := memStore(t)
	_, err := runtime.New(compileText(t, flow), runtime.Options{AMQPURL: "amqp://127.0.0.1:1/", Registry: st, Schedules: st})
	if err == nil {
		t.Fatal("runtime.New accepted a schedule whose payload does not fit its Avro input type")
	}
	for _, want := range []string{`schedule "broken"`, `flow "avl"`, "Avro type Order", "f.yaml:", "qty"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	// The same flow with a payload that fits is accepted.
	fits := strings.Replace(flow, "qty: many", "qty: 2", 1)
	if _, err := runtime.New(compileText(t, fits), runtime.Options{AMQPURL: "amqp://127.0.0.1:1/", Registry: st, Schedules: st}); err != nil {
		t.Fatalf("runtime.New refused a schedule whose payload fits: %v", err)
	}
}
