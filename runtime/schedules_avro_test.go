package runtime_test

import (
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
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
	st, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
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
