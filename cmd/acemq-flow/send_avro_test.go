package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/test/testenv"
)

const sendAvroFlow = `version: acemq.flow/v1
name: sav
types:
  Order: {avro: {type: record, name: Order, fields: [{name: id, type: string}, {name: qty, type: int}]}}
plugins:
  k: {command: ./k}
pipelines:
  - name: sav
    input: Order
    steps:
      - {name: a, handler: k.a}
`

// send PATH to a pipeline whose input type is Avro publishes the payload
// in the Confluent framing, with the id the registry (here a runtime's
// admin listener, by --registry) has for the type's subject; a subject the
// registry lacks fails the send, naming the type and how to fix it, and
// nothing is published.
func TestSendEncodesAnAvroInputType(t *testing.T) {
	url := testenv.VHost(t)
	reg, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := admin.New(admin.Options{Addr: "127.0.0.1:0", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(file, []byte(sendAvroFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	ch := testenv.ConfirmedChannel(t, url)
	if err := ch.ExchangeDeclare("sav", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("sav.a", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("sav.a", "a", "sav", false, nil); err != nil {
		t.Fatal(err)
	}
	args := []string{"send", file, "--pipeline", "sav", "--data", `{"id":"o-1","qty":2}`, "--amqp", url, "--registry", srv.URL}

	_, errOut, code := cli(t, args...)
	if code != 1 || !strings.Contains(errOut, "type Order is Avro") || !strings.Contains(errOut, "acemq-flow run") {
		t.Fatalf("send with the subject unregistered: exit %d, stderr %q; want exit 1 naming type Order and acemq-flow run", code, errOut)
	}
	if q, err := ch.QueueDeclarePassive("sav.a", false, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Fatalf("sav.a holds %d messages (%v) after a failed send, want 0", q.Messages, err)
	}

	set, err := spec.LoadPaths(spec.Options{}, file)
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := reg.RegisterSchema(t.Context(), "sav.Order", stores.SchemaAvro, set.Flows[0].Type("Order").Avro.Text)
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := cli(t, args...); code != 0 {
		t.Fatalf("send: exit %d, stderr %q; want 0", code, errOut)
	}
	var d amqp.Delivery
	testenv.Eventually(t, 30*time.Second, func() error {
		got, ok, err := ch.Get("sav.a", true)
		if err != nil || !ok {
			return testenv.Errorf("sav.a: %v, %v", ok, err)
		}
		d = got
		return nil
	})
	id, _, err := codec.ReadFrame(d.Body)
	if err != nil || id != v.ID || d.ContentType != codec.ContentType || d.Headers[codec.HeaderSchemaID] != codec.HeaderValue(v.ID) {
		t.Fatalf("send published content type %q, header %v, frame id %d (%v); want Avro with id %d", d.ContentType, d.Headers[codec.HeaderSchemaID], id, err, v.ID)
	}
	js, _, err := codec.New(reg, codec.Options{}).Decode(t.Context(), set.Flows[0].Type("Order"), d.Body)
	if err != nil || string(js) != `{"id":"o-1","qty":2}` {
		t.Fatalf("the sent body decodes to %s (%v), want the payload", js, err)
	}
}
