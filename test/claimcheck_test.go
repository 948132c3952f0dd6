package test

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/fileblobs"
	"github.com/acemq/acemq-flow/test/queuetest"
)

// The claim check's pieces beneath the engine, through a real RabbitMQ
// queue (FLOW-FORMAT §6): a 10 MiB body goes to the file blob store, the
// queue holds only the small reference, and a reader tells it from an
// inline and a pre-claim-check message without being told, fetches the
// body, checked, and gets back the message as it was sent.
func TestClaimCheckPiecesThroughTheBroker(t *testing.T) {
	q := queuetest.New(t)
	queue := q.Queue("scans.read")
	blobs, err := fileblobs.Open(t.TempDir(), stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 10<<20)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	orig := decide.Message{RoutingKey: queue, MessageID: "scan-1", ContentType: "application/octet-stream",
		DeliveryMode: decide.Persistent, Headers: decide.Table{"x-acemq-attempt": int64(1)}, Body: payload}

	if !decide.ShouldClaimCheck(len(orig.Body), 0) {
		t.Fatal("ShouldClaimCheck(10 MiB, default) = false")
	}
	key, err := blobs.PutBlob(t.Context(), orig.Body)
	if err != nil {
		t.Fatal(err)
	}
	sent := decide.WithClaimCheck(orig, decide.ClaimCheck{Key: key, Size: int64(len(orig.Body)), ContentType: orig.ContentType})
	small := decide.Message{RoutingKey: queue, MessageID: "note-1", ContentType: "application/json", Body: []byte(`{"note":"inline"}`)}
	old := decide.Message{RoutingKey: queue, MessageID: "legacy-1", Body: []byte("written before the claim check")}
	for _, m := range []decide.Message{sent, small, old} {
		if err := q.Pub.Publish(t.Context(), wire.Publishing(m)); err != nil {
			t.Fatalf("publish %s: %v", m.MessageID, err)
		}
	}

	got := q.Drain(queue)
	if len(got) != 3 {
		t.Fatalf("the queue held %d messages, want 3", len(got))
	}
	// What sits in the queue is the reference, never the 10 MiB.
	if n := len(got[0].Body); n > 256 {
		t.Fatalf("the claim-checked message on the queue is %d bytes, want the small reference", n)
	}
	for i, d := range got {
		m := wire.Message(&d)
		ref, ok, err := decide.ReadClaimCheck(m)
		if err != nil {
			t.Fatalf("ReadClaimCheck(%s): %v", m.MessageID, err)
		}
		if ok != (i == 0) {
			t.Fatalf("ReadClaimCheck(%s) = reference %v, want %v", m.MessageID, ok, i == 0)
		}
		if !ok {
			continue
		}
		if info, err := blobs.StatBlob(t.Context(), ref.Key); err != nil || info.Size != 10<<20 {
			t.Fatalf("StatBlob(%s) = %+v, %v; want 10 MiB", ref.Key, info, err)
		}
		body, err := blobs.GetBlob(t.Context(), ref.Key)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decide.RestoreClaimCheck(m, ref, body)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back.Body, payload) || back.ContentType != "application/octet-stream" || back.MessageID != "scan-1" {
			t.Fatalf("the restored message: %d bytes of %q, id %s; want the original", len(back.Body), back.ContentType, back.MessageID)
		}
		if _, ok := back.Headers[decide.HeaderClaimCheck]; ok {
			t.Fatal("the restored message still carries the claim-check header")
		}
	}
}
