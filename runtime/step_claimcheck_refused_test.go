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
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
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

// TestARefusedResultRetriesTheReference: step b's queue is full
// (reject-publish), so the broker nacks step a's result of a claim-checked
// message. The retry that follows, through a's 1s rung, and the dead letter
// after the last attempt must carry the reference the message arrived with
// (its header, content type and small body, FLOW-FORMAT §6), never the
// payload the claim check fetched: a queue must never hold it. The handler
// gets the whole payload on both attempts, so the rung held a reference
// that still reads; and a replay of the dead letter, once b has room,
// reaches b as the reference.
func TestARefusedResultRetriesTheReference(t *testing.T) {
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
	runtimetest.Start(t, url, claimCheckRefusedFlow, runtime.Options{Blobs: blobs, Handlers: map[string]runtime.HandlerFunc{"k.echo": echo}})
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

	var dl amqp.Delivery
	testenv.Eventually(t, 30*time.Second, func() error {
		m, ok, err := ch.Get("p.a.dlq", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return testenv.Errorf("p.a.dlq is empty")
		}
		dl = m
		return nil
	})
	if dl.Headers[decide.HeaderClaimCheck] != key || dl.ContentType != decide.ClaimCheckContentType || !bytes.Equal(dl.Body, ref.Body()) {
		t.Fatalf("the dead letter has claim check %v, content type %q and a body of %d bytes; want the %d-byte reference it arrived as",
			dl.Headers[decide.HeaderClaimCheck], dl.ContentType, len(dl.Body), len(ref.Body()))
	}
	if reason, _ := dl.Headers[plan.HeaderError].(string); !strings.Contains(reason, "refused by the broker") {
		t.Errorf("dead-lettered with reason %q, want one saying the broker refused the result", reason)
	}
	if attempt, _ := dl.Headers[plan.HeaderAttempt].(int64); attempt != 2 {
		t.Errorf("dead-lettered at attempt %v, want 2: once round the rung", dl.Headers[plan.HeaderAttempt])
	}
	mu.Lock()
	if len(seen) != 2 || seen[0] != len(input) || seen[1] != len(input) {
		t.Errorf("the handler got payloads of %v bytes, want the %d-byte body on each of 2 attempts", seen, len(input))
	}
	mu.Unlock()

	// Replayed once b has room, it reaches b, as the reference.
	testenv.Rabbitmqctl(t, "clear_policy", "-p", testenv.VHostOf(url), "full-b")
	if err := ch.Publish("", "p.a.dlq", false, false, amqp.Publishing{MessageId: dl.MessageId, ContentType: dl.ContentType, Headers: dl.Headers, Body: dl.Body}); err != nil {
		t.Fatal(err)
	}
	waitDepth(t, channelOn(t, url), "p.a.dlq", 1)
	if _, err := ops.Replay(t.Context(), url, ops.ReplayOptions{From: "p.a.dlq"}); err != nil {
		t.Fatal(err)
	}
	waitDepth(t, channelOn(t, url), "p.b", 2)
	if _, ok, err := ch.Get("p.b", true); err != nil || !ok {
		t.Fatalf("get the filler from p.b: %v (got one: %v)", err, ok)
	}
	m, ok, err := ch.Get("p.b", true)
	if err != nil || !ok {
		t.Fatalf("get the replayed result from p.b: %v (got one: %v)", err, ok)
	}
	if m.Headers[decide.HeaderClaimCheck] != key || m.ContentType != decide.ClaimCheckContentType || !bytes.Equal(m.Body, ref.Body()) {
		t.Fatalf("p.b holds claim check %v, content type %q and a body of %d bytes; want the reference of the payload", m.Headers[decide.HeaderClaimCheck], m.ContentType, len(m.Body))
	}
}
