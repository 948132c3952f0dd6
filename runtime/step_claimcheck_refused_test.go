package runtime_test

import (
	"bytes"
	"context"
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

const claimCheckRefusedFlow = `version: acemq.flow/v1
name: ccr
defaults:
  claim_check: {above: 1KiB}
plugins:
  k: {command: ./not-started}
pipelines:
  - name: p
    steps:
      - {name: a, handler: k.echo, queue_type: classic, retry: {max_attempts: 2, initial_delay: 1s, max_delay: 1s, jitter: 0}}
      - {name: b, handler: k.echo, queue_type: classic, auto_startup: false}
`

// TestARefusedResultIsPublishedAgainAsTheReference: step b's queue is full
// (reject-publish), so the broker nacks step a's result of a claim-checked
// message. The delivery is held and the result published again until b has
// room (decide.PublishFailed), and what reaches b is the reference the
// message arrived with (its header, content type and small body,
// FLOW-FORMAT §6), never the payload the claim check fetched: a queue must
// never hold it. The handler got the whole payload, once.
func TestARefusedResultIsPublishedAgainAsTheReference(t *testing.T) {
	url := testenv.VHost(t)
	testenv.Rabbitmqctl(t, "set_policy", "-p", testenv.VHostOf(url), "--apply-to", "queues", "full-b", `^p\.b$`,
		`{"max-length":1,"overflow":"reject-publish"}`)
	blobs, err := memory.OpenBlobs(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	input := []byte(`{"blob":"` + strings.Repeat("i", 8<<10) + `"}`)
	key, err := blobs.PutBlob(t.Context(), input)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []int // the payload sizes the handler got
	)
	echo := func(_ context.Context, req runtime.Request) (decide.Result, error) {
		mu.Lock()
		seen = append(seen, len(req.Payload))
		mu.Unlock()
		return decide.Result{Payload: req.Payload}, nil
	}
	rt, _ := runtimetest.Start(t, url, claimCheckRefusedFlow, runtime.Options{Blobs: blobs, Handlers: map[string]runtime.HandlerFunc{"k.echo": echo}})
	ch := testenv.ConfirmedChannel(t, url)
	// b's one place is taken.
	if err := ch.PublishWithContext(t.Context(), "", "p.b", true, false, amqp.Publishing{MessageId: "filler", ContentType: "application/json", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	waitDepth(t, channelOn(t, url), "p.b", 1)
	ref := decide.ClaimCheck{Key: key, Size: int64(len(input)), ContentType: "application/json"}
	if err := ch.PublishWithContext(t.Context(), "", "p.a", true, false, amqp.Publishing{
		MessageId: "big", ContentType: decide.ClaimCheckContentType,
		Headers: amqp.Table{decide.HeaderClaimCheck: key}, Body: ref.Body(),
	}); err != nil {
		t.Fatal(err)
	}

	counters(t, rt, "p.a", runtime.OutcomeRepublished, 1)
	// b gets room: the held result reaches it, as the reference.
	if _, ok, err := ch.Get("p.b", true); err != nil || !ok {
		t.Fatalf("get the filler from p.b: %v (got one: %v)", err, ok)
	}
	var m amqp.Delivery
	testenv.Eventually(t, 30*time.Second, func() error {
		d, ok, err := ch.Get("p.b", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return testenv.Errorf("the held result has not reached p.b")
		}
		m = d
		return nil
	})
	if m.Headers[decide.HeaderClaimCheck] != key || m.ContentType != decide.ClaimCheckContentType || !bytes.Equal(m.Body, ref.Body()) {
		t.Fatalf("p.b holds claim check %v, content type %q and a body of %d bytes; want the %d-byte reference of the payload",
			m.Headers[decide.HeaderClaimCheck], m.ContentType, len(m.Body), len(ref.Body()))
	}
	got := counters(t, rt, "p.a", decide.OutcomeAcknowledged, 1)
	if got[decide.OutcomeRetried] != 0 || got[decide.OutcomeDeadLettered] != 0 {
		t.Errorf("p.a counted %v; want nothing retried or dead-lettered", got)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0] != len(input) {
		t.Errorf("the handler got payloads of %v bytes, want the %d-byte body once", seen, len(input))
	}
	mu.Unlock()
}
