package runtime_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/relay"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// ownCCFlow has a pipeline whose one step waits to be started, so that
// what reaches its queue can be read, and a claim check above 1 KiB for
// the whole flow (not the 64 KiB default).
const ownCCFlow = `version: acemq.flow/v1
name: occ
defaults:
  claim_check: {above: 1KiB}
plugins:
  k: {command: ./not-started}
pipelines:
  - name: occ
    steps:
      - {name: a, handler: k.a, auto_startup: false}
`

// payloads returns the handler of k.a, which sends each payload it gets
// on the channel it returns.
func payloads() (runtime.HandlerFunc, <-chan []byte) {
	got := make(chan []byte, 16)
	return func(_ context.Context, req runtime.Request) (decide.Result, error) {
		select {
		case got <- bytes.Clone(req.Payload):
		default:
		}
		return decide.Result{}, nil
	}, got
}

// claimCheckedIn waits until queue holds message id as a reference to
// body (its key and size, not the body) and fails when it holds it whole.
func claimCheckedIn(t *testing.T, url string, queues []string, id string, body []byte) {
	t.Helper()
	key := stores.BlobKey(body)
	testenv.Eventually(t, 30*time.Second, func() error {
		views, err := ops.InspectMany(t.Context(), url, "own claim check test", queues, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range views {
			for _, m := range v.Messages {
				if m.MessageID != id {
					continue
				}
				if m.ClaimCheck == nil || m.ClaimCheck.Key != key || m.ClaimCheck.Size != int64(len(body)) || m.Size >= 1024 {
					t.Fatalf("%s holds message %s of %d bytes with claim check %+v; want a reference to its %d-byte body, %s", v.Queue, id, m.Size, m.ClaimCheck, len(body), key)
				}
				return nil
			}
		}
		return testenv.Errorf("message %s is not in %v yet", id, queues)
	})
}

// wholeBody waits for the handler to get body.
func wholeBody(t *testing.T, got <-chan []byte, body []byte) {
	t.Helper()
	select {
	case p := <-got:
		if !bytes.Equal(p, body) {
			t.Fatalf("the handler got %d bytes, want the %d-byte body the reference names", len(p), len(body))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler got nothing within 30s")
	}
}

// TestPublishInClaimChecksByTheDestinationsThreshold: a body PublishIn
// sends to a step above its flow's claim_check.above (1 KiB, with no type
// to name it) waits in the delay ladder and then in the step's queue as a
// reference, its body in the blob store, and the step's handler gets it
// whole; before, only a body above the 64 KiB default was claim-checked.
func TestPublishInClaimChecksByTheDestinationsThreshold(t *testing.T) {
	url := testenv.VHost(t)
	blobs, err := memory.OpenBlobs(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	work, got := payloads()
	rt, pl := runtimetest.Start(t, url, ownCCFlow, runtime.Options{Blobs: blobs, Delays: true, LadderUnit: 100 * time.Millisecond,
		Handlers: map[string]runtime.HandlerFunc{"k.a": work}})
	body := []byte(`{"blob":"` + strings.Repeat("d", 4<<10) + `"}`)
	if err := rt.PublishIn(t.Context(), decide.Message{Exchange: "occ", RoutingKey: "a", MessageID: "later", ContentType: "application/json", Body: body}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var ladder []string
	for k := range plan.LadderLevels {
		ladder = append(ladder, plan.LadderQueue(k))
	}
	claimCheckedIn(t, url, ladder, "later", body)
	if b, err := blobs.GetBlob(t.Context(), stores.BlobKey(body)); err != nil || !bytes.Equal(b, body) {
		t.Fatalf("the blob store holds %d bytes under the body's key (%v), want the body", len(b), err)
	}
	claimCheckedIn(t, url, []string{"occ.a"}, "later", body)
	if err := rt.Start(t.Context(), pl.Consumers[0].ID); err != nil {
		t.Fatal(err)
	}
	wholeBody(t, got, body)
}

// TestAScheduleFiresByClaimCheck: a schedule's payload above its flow's
// claim_check.above is written to the outbox as a reference, its body in
// the blob store; the relay publishes the reference to the step's queue,
// and the step's handler gets the payload whole. Before, the firing went
// whole into the outbox and to the broker.
func TestAScheduleFiresByClaimCheck(t *testing.T) {
	url := testenv.VHost(t)
	st := memStore(t)
	blobs, err := memory.OpenBlobs(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	payload := `{"blob":"` + strings.Repeat("s", 4<<10) + `"}`
	flow := ownCCFlow + "schedules:\n  - {name: tick, every: 1s, send: {pipeline: occ, payload: " + payload + "}}\n"
	work, got := payloads()
	rt, pl := runtimetest.Start(t, url, flow, runtime.Options{Blobs: blobs, Schedules: st, Handlers: map[string]runtime.HandlerFunc{"k.a": work}})
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
	body := []byte(payload)
	key := stores.BlobKey(body)
	if rec.ContentType != decide.ClaimCheckContentType || rec.Properties.Headers[decide.HeaderClaimCheck] != key || len(rec.Body) >= 1024 {
		t.Fatalf("the firing's outbox record has content type %q, claim check %v and %d bytes; want a reference to its %d-byte payload, %s",
			rec.ContentType, rec.Properties.Headers[decide.HeaderClaimCheck], len(rec.Body), len(body), key)
	}
	if b, err := blobs.GetBlob(t.Context(), key); err != nil || !bytes.Equal(b, body) {
		t.Fatalf("the blob store holds %d bytes under the payload's key (%v), want the payload", len(b), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	relayed := make(chan error, 1)
	go func() { relayed <- relay.Run(ctx, url, st, relay.Options{Poll: 20 * time.Millisecond}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-relayed; err != nil {
			t.Errorf("relay.Run = %v after shutdown, want nil", err)
		}
	})
	claimCheckedIn(t, url, []string{"occ.a"}, rec.Properties.MessageID, body)
	if err := rt.Start(t.Context(), pl.Consumers[0].ID); err != nil {
		t.Fatal(err)
	}
	wholeBody(t, got, body)
}
