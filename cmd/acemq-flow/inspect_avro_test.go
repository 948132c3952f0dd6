package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/test/queuetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// inspect shows an Avro message as JSON, decoded by its writer's schema,
// which it fetches by the frame's id from --registry (here a runtime's
// admin listener); a message whose id the registry lacks, and every Avro
// message when the registry cannot be reached, is shown in hex with the
// reason. The messages stay in the queue.
func TestInspectDecodesAvroByTheRegistry(t *testing.T) {
	e := queuetest.New(t)
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
	set, err := spec.Load(testenv.FlowFS(sendAvroFlow), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	order := set.Flows[0].Type("Order")
	body, id, err := codec.New(reg, codec.Options{}).Encode(t.Context(), order, []byte(`{"id":"o-1","qty":2}`))
	if err != nil {
		t.Fatal(err)
	}
	q := e.Queue("avro.dlq")
	put := func(id string, body []byte) {
		t.Helper()
		if err := e.Pub.Publish(t.Context(), broker.Message{RoutingKey: q, Publishing: amqp.Publishing{
			MessageId: id, ContentType: codec.ContentType, Body: body}}); err != nil {
			t.Fatal(err)
		}
	}
	put("known", body)
	put("unknown", codec.AppendFrame(nil, 999, body[codec.FrameSize:]))

	out, errOut, code := cli(t, "inspect", q, "--amqp", e.URL, "--registry", srv.URL)
	if code != 0 {
		t.Fatalf("inspect: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{
		`payload (` + itoa(len(body)) + ` bytes, Avro, schema id ` + itoa(id) + `, as JSON): {"id":"o-1","qty":2}`,
		`payload (` + itoa(len(body)) + ` bytes, Avro, schema id 999, in hex): 00 00 00 03 e7 `,
		`not decoded: schema id 999 `,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect printed\n%s\nwant it to contain %q", out, want)
		}
	}

	out, errOut, code = cli(t, "inspect", q, "--amqp", e.URL, "--registry", srv.URL, "--format", "json")
	var view ops.QueueView
	if err := json.Unmarshal([]byte(out), &view); code != 0 || err != nil || len(view.Messages) != 2 {
		t.Fatalf("inspect --format json: exit %d (%v), stderr %s\n%s", code, err, errOut, out)
	}
	if a := view.Messages[0].Avro; a == nil || !a.Decoded || a.SchemaID != id || view.Messages[0].Preview != `{"id":"o-1","qty":2}` {
		t.Errorf("inspect --format json shows the known message as %+v, preview %q; want decoded with id %d", a, view.Messages[0].Preview, id)
	}

	out, errOut, code = cli(t, "inspect", q, "--amqp", e.URL, "--registry", "http://127.0.0.1:1")
	if code != 0 {
		t.Fatalf("inspect with the registry down: exit %d, stderr %s", code, errOut)
	}
	if n := strings.Count(out, "not decoded: the schema registry (--registry http://127.0.0.1:1) could not be asked"); n != 2 || !strings.Contains(out, "connection refused") {
		t.Errorf("inspect with the registry down printed\n%s\nwant both messages not decoded, naming the registry", out)
	}
	if !strings.Contains(out, "in hex): 00 00 00 00 "+hex2(id)) {
		t.Errorf("inspect with the registry down printed\n%s\nwant the known message's frame in hex", out)
	}
	e.WaitDepth(q, 2)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// hex2 is the last byte of a small id, as HexPreview writes it.
func hex2(id int) string { s, _ := ops.HexPreview([]byte{byte(id)}, 2); return s }
