package runtime_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

const claimCheckFlow = `version: acemq.flow/v1
name: cc
defaults:
  retry: {max_attempts: 2, initial_delay: 100ms, max_delay: 100ms, jitter: 0}
types:
  Doc: {type: object, claim_check: {above: 1KiB}}
plugins:
  k: {command: ./not-started}
consumers:
  - {id: work, queue: cc.work, handler: k.work, output: Doc, declare: {type: quorum}}
`

// countingBlobs is a blob store that counts its puts.
type countingBlobs struct {
	stores.Blobs
	mu   sync.Mutex
	puts int
}

func (c *countingBlobs) PutBlob(ctx context.Context, content []byte) (string, error) {
	c.mu.Lock()
	c.puts++
	c.mu.Unlock()
	return c.Blobs.PutBlob(ctx, content)
}

func (c *countingBlobs) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts
}

// TestClaimCheckAroundTheHandler: the handler gets the body a reference
// names, on every attempt; a result above its output type's threshold
// (1 KiB here) is put in the blob store and sent as a reference; a message
// dead-lettered as it arrived carries its reference, not the body, and its
// blob is not put again.
func TestClaimCheckAroundTheHandler(t *testing.T) {
	url := testenv.VHost(t)
	mem, err := memory.OpenBlobs(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	blobs := &countingBlobs{Blobs: mem}
	input := []byte(`{"blob":"` + strings.Repeat("i", 100<<10) + `"}`)
	result := []byte(`{"result":"` + strings.Repeat("r", 2<<10) + `"}`)
	key, err := mem.PutBlob(t.Context(), input)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []int // the payload sizes the handler got
	)
	work := func(_ context.Context, req runtime.Request) (decide.Result, error) {
		mu.Lock()
		seen = append(seen, len(req.Payload))
		mu.Unlock()
		if !bytes.Equal(req.Payload, input) {
			return decide.Result{}, fmt.Errorf("%w: the handler got %d bytes, not the body the reference names", decide.ErrFatal, len(req.Payload))
		}
		switch {
		case req.Envelope.MessageID == "fatal":
			return decide.Result{}, fmt.Errorf("%w: refused", decide.ErrFatal)
		case req.Envelope.Attempt == 1:
			return decide.Result{}, errors.New("try again")
		}
		return decide.Result{Payload: result}, nil
	}
	rt, _ := runtimetest.Start(t, url, claimCheckFlow, runtime.Options{Blobs: blobs, Delays: true, LadderUnit: 10 * time.Millisecond,
		Handlers: map[string]runtime.HandlerFunc{"k.work": work}})
	ch := testenv.ConfirmedChannel(t, url)
	if _, err := ch.QueueDeclare("cc.replies", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	replies, err := ch.Consume("cc.replies", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := decide.ClaimCheck{Key: key, Size: int64(len(input)), ContentType: "application/json"}
	publish := func(id, replyTo string) {
		t.Helper()
		if err := ch.PublishWithContext(t.Context(), "", "cc.work", true, false, amqp.Publishing{
			MessageId: id, ReplyTo: replyTo, ContentType: decide.ClaimCheckContentType,
			Headers: amqp.Table{decide.HeaderClaimCheck: key}, Body: ref.Body(),
		}); err != nil {
			t.Fatal(err)
		}
	}

	publish("retried", "cc.replies")
	select {
	case m := <-replies:
		wantKey := stores.BlobKey(result)
		if m.Headers["x-acemq-outcome"] != "completed" || m.Headers[decide.HeaderClaimCheck] != wantKey || m.ContentType != decide.ClaimCheckContentType {
			t.Fatalf("reply %v with claim check %v, content type %q; want completed, by claim check of %s", m.Headers["x-acemq-outcome"], m.Headers[decide.HeaderClaimCheck], m.ContentType, wantKey)
		}
		if got, err := mem.GetBlob(t.Context(), wantKey); err != nil || !bytes.Equal(got, result) {
			t.Fatalf("the blob store holds %d bytes under the result's key (%v), want the result", len(got), err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no reply to the claim-checked message")
	}
	mu.Lock()
	if len(seen) != 2 || seen[0] != len(input) || seen[1] != len(input) {
		t.Errorf("the handler got payloads of %v bytes, want the %d-byte body on each of 2 attempts", seen, len(input))
	}
	mu.Unlock()
	if n := blobs.count(); n != 1 {
		t.Errorf("the runtime put %d blobs, want 1: the result; the retried input's blob is stored already", n)
	}

	publish("fatal", "")
	var dl amqp.Delivery
	testenv.Eventually(t, 30*time.Second, func() error {
		m, ok, err := ch.Get("cc.work.dlq", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return testenv.Errorf("cc.work.dlq is empty")
		}
		dl = m
		return nil
	})
	if dl.Headers[decide.HeaderClaimCheck] != key || !bytes.Equal(dl.Body, ref.Body()) || dl.ContentType != decide.ClaimCheckContentType {
		t.Fatalf("the dead letter has claim check %v, content type %q and %d bytes; want the reference it arrived as", dl.Headers[decide.HeaderClaimCheck], dl.ContentType, len(dl.Body))
	}
	if n := blobs.count(); n != 1 {
		t.Errorf("the runtime put %d blobs, want still 1: a dead letter carries the reference it arrived with", n)
	}

	// The Go API claim-checks as send does: the handler gets the whole
	// body from the reference PublishIn sent.
	if err := rt.PublishIn(t.Context(), decide.Message{RoutingKey: "cc.work", MessageID: "later", ReplyTo: "cc.replies",
		ContentType: "application/json", Body: input}, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-replies:
		if m.Headers["x-acemq-outcome"] != "completed" {
			t.Fatalf("the reply to PublishIn's message is %v (%v), want completed: its handler got the body", m.Headers["x-acemq-outcome"], m.Headers["x-acemq-error"])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no reply to the message PublishIn sent")
	}
	if n := blobs.count(); n != 3 {
		t.Errorf("the runtime put %d blobs, want 3: PublishIn's body and its result besides the first result", n)
	}
}
