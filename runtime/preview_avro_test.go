package runtime_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestDeadLetterPreviewsDecodeAvro: the status page's dead letters
// (ops.StatusReads with the runtime's AvroPreviews) show an Avro dead
// letter as JSON, decoded by its writer's schema from the runtime's own
// registry, marked decoded; one whose id the registry does not have in
// hex, saying why; a claim-checked one by its key and size, its blob not
// fetched. Without the decoder, as before, the Avro body was raw bytes.
func TestDeadLetterPreviewsDecodeAvro(t *testing.T) {
	url := testenv.VHost(t)
	reg := memRegistry(t)
	rt, pl := runtimetest.Start(t, url, avroLaterFlow, runtime.Options{Registry: reg})
	dlq := plan.DeadLetterQueue("avl.a")
	order, err := runtime.EncodeMessage(t.Context(), codec.New(reg, codec.Options{}), pl.Consumers[0].File.Type("Order"),
		decide.Message{Body: []byte(`{"id":"o-1","qty":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := codec.ReadFrame(order.Body)
	unknown := append([]byte(nil), order.Body...)
	binary.BigEndian.PutUint32(unknown[1:5], 99999)
	ref := decide.ClaimCheck{Key: stores.BlobKey([]byte("never stored")), Size: 123456, ContentType: "application/json"}
	ch := testenv.ConfirmedChannel(t, url)
	fatal := amqp.Table{plan.HeaderError: "refused", plan.HeaderErrorKind: "fatal"}
	for _, p := range []amqp.Publishing{
		{MessageId: "avro", ContentType: codec.ContentType, Headers: fatal, Body: order.Body},
		{MessageId: "unknown-id", ContentType: codec.ContentType, Headers: fatal, Body: unknown},
		{MessageId: "claim-checked", ContentType: decide.ClaimCheckContentType,
			Headers: amqp.Table{plan.HeaderError: "refused", plan.HeaderErrorKind: "fatal", decide.HeaderClaimCheck: ref.Key}, Body: ref.Body()},
	} {
		if err := ch.PublishWithContext(t.Context(), "", dlq, true, false, p); err != nil {
			t.Fatal(err)
		}
	}
	reads := ops.StatusReads{URL: url, Plan: pl, Decoder: rt.AvroPreviews()}
	got, err := reads.DeadLetters(t.Context())
	if err != nil {
		t.Fatalf("StatusReads.DeadLetters: %v", err)
	}
	v := got.(ops.DeadLettersView)
	if len(v.Groups) != 1 || len(v.Groups[0].First) != 3 {
		t.Fatalf("StatusReads.DeadLetters = %+v, want one group of the 3 dead letters", v.Groups)
	}
	byID := map[string]ops.MessageView{}
	for _, m := range v.Groups[0].First {
		byID[m.MessageID] = m
	}
	if m := byID["avro"]; m.Avro == nil || !m.Avro.Decoded || m.Avro.SchemaID != id || m.Preview != `{"id":"o-1","qty":2}` {
		t.Errorf("the Avro dead letter's preview is %q (avro %+v); want its JSON, decoded by schema %d", m.Preview, m.Avro, id)
	}
	if m := byID["unknown-id"]; m.Avro == nil || m.Avro.Decoded || m.Avro.SchemaID != 99999 || !strings.Contains(m.Avro.Note, "99999") || !strings.HasPrefix(m.Preview, "00 00 01 86 9f") {
		t.Errorf("the dead letter with an unknown id shows %q (avro %+v); want its bytes in hex and a note naming id 99999", m.Preview, m.Avro)
	}
	if m := byID["claim-checked"]; m.ClaimCheck == nil || m.ClaimCheck.Key != ref.Key || m.ClaimCheck.Size != 123456 || m.Avro != nil {
		t.Errorf("the claim-checked dead letter shows claim check %+v (avro %+v); want key %s and size 123456, not fetched", m.ClaimCheck, m.Avro, ref.Key)
	}
}

// failingRegistry is a schema registry whose store does not answer.
type failingRegistry struct{ codec.Registry }

func (failingRegistry) SchemaByID(context.Context, int) (stores.Schema, bool, error) {
	return stores.Schema{}, false, errors.New("connection refused")
}

// AvroPreviews says when the registry, not the message, failed: its error
// reports Unavailable, so that a read of many dead letters asks once.
func TestAvroPreviewsSayTheRegistryIsUnavailable(t *testing.T) {
	set, err := spec.Load(testenv.FlowFS(avroLaterFlow), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(pl, runtime.Options{AMQPURL: "amqp://127.0.0.1:1/", Registry: failingRegistry{}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = rt.AvroPreviews().Decode(t.Context(), []byte{0, 0, 0, 0, 7, 2})
	var un interface{ Unavailable() bool }
	if !errors.As(err, &un) || !un.Unavailable() || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("AvroPreviews.Decode with the registry down = %v; want an error that reports Unavailable and names the cause", err)
	}
}
