package storetest

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/stores"
)

// RunOutbox runs the outbox's cases: the write side in the backend's own
// transaction, and the relay side.
func RunOutbox(t *testing.T, open Opener, f Features) {
	cases := []struct {
		name string
		run  func(t *testing.T, open Opener, f Features)
	}{
		{"a rolled-back transaction leaves nothing to publish", rollbackWritesNothing},
		{"the relay must not double-encode: bytes in are bytes out", bytesUnchanged},
		{"a row inserted with plain SQL by another language is handed out unchanged", foreignInsert},
		{"a batch is leased oldest first and not handed out twice", batchLeased},
		{"concurrent relays from two pools never share a row", concurrentRelays},
		{"a relay that dies mid-batch loses its lease and another takes the batch", relayDiesMidBatch},
		{"a failed row is retried after the delay, then stuck and still listed", failedThenStuck},
		{"only the lease owner may mark a row", onlyOwnerMarks},
		{"published rows are purged, pending ones kept", purgePublished},
		{"a committed record survives closing the store", durableRecord},
		{"deliver_at reads back to the millisecond, rounded up, zero as zero, and does not hold the record back", deliverAtKept},
		{"the writer's trace context is kept with the record: the caller's span, or the record's own, or none", traceParentKept},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open, f) })
	}
}

func rec(i int) stores.OutboxRecord {
	return stores.OutboxRecord{
		Exchange:    "orders",
		RoutingKey:  "order.placed",
		Body:        []byte(fmt.Sprintf(`{"id":"o-%d"}`, i)),
		ContentType: "application/json",
	}
}

func write(t *testing.T, b Backend, recs ...stores.OutboxRecord) []int64 {
	t.Helper()
	ids, err := b.WriteOutbox(t.Context(), true, recs...)
	if err != nil {
		t.Fatalf("write %d outbox records: %v", len(recs), err)
	}
	if len(ids) != len(recs) {
		t.Fatalf("write %d outbox records returned %d ids", len(recs), len(ids))
	}
	return ids
}

func ids(rs []stores.OutboxRecord) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func claimBatch(t *testing.T, s stores.OutboxRelay, owner string, n int, lease time.Duration) []stores.OutboxRecord {
	t.Helper()
	rs, err := s.ClaimBatch(t.Context(), owner, n, lease)
	if err != nil {
		t.Fatalf("ClaimBatch(%s, %d): %v", owner, n, err)
	}
	return rs
}

func pendingIDs(t *testing.T, s stores.OutboxRelay) []int64 {
	t.Helper()
	rs, err := s.ListPending(t.Context(), 0)
	if err != nil {
		t.Fatalf("ListPending: %v", err)
	}
	return ids(rs)
}

func rollbackWritesNothing(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	if _, err := b.WriteOutbox(t.Context(), false, rec(1), rec(2)); err != nil {
		t.Fatalf("write and roll back: %v", err)
	}
	if got := pendingIDs(t, b.Set); len(got) != 0 {
		t.Fatalf("ListPending after rollback = %v, want nothing", got)
	}
	if got := claimBatch(t, b.Set, "relay", 10, time.Minute); len(got) != 0 {
		t.Fatalf("ClaimBatch after rollback = %v, want nothing", ids(got))
	}
	kept := write(t, b, rec(3))
	if got := pendingIDs(t, b.Set); !slices.Equal(got, kept) {
		t.Fatalf("ListPending after commit = %v, want %v", got, kept)
	}
}

// A relay that decoded and re-encoded the payload double-encoded it; that
// shipped once. The store keeps bytes as bytes.
func bytesUnchanged(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	big := make([]byte, 1<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	bodies := map[string][]byte{
		"json object, odd spacing and key order": []byte(`{"z": 1,  "a" :[1,2.50, "x"]}`),
		"json string literal":                    []byte(`"already a JSON string"`),
		"not utf-8, with NUL":                    {0x00, 0xff, 0xfe, 'x', 0x80, 0x00},
		"empty":                                  {},
		"base64-looking text":                    []byte("eyJhIjoxfQ=="),
		"1 MiB of random bytes":                  big,
	}
	props := stores.Properties{
		MessageID:     "m-1",
		CorrelationID: "c-1",
		Type:          "order.placed",
		DeliveryMode:  2,
		Priority:      3,
		Timestamp:     1893456000,
		Headers: map[string]any{
			"x-int":    9007199254740993, // beyond float64 precision
			"x-str":    "s",
			"x-bool":   true,
			"x-nested": map[string]any{"a": []any{1, "b"}},
		},
	}
	wantProps := props
	wantProps.Headers = map[string]any{
		"x-int":    json.Number("9007199254740993"),
		"x-str":    "s",
		"x-bool":   true,
		"x-nested": map[string]any{"a": []any{json.Number("1"), "b"}},
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range bodies {
			if !yield(k) {
				return
			}
		}
	})
	var recs []stores.OutboxRecord
	for _, name := range names {
		recs = append(recs, stores.OutboxRecord{
			Exchange: "orders", RoutingKey: "order.placed", Body: bodies[name],
			ContentType: "application/octet-stream; name=" + name, Properties: props,
		})
	}
	written := write(t, b, recs...)
	check := func(from string, got []stores.OutboxRecord) {
		t.Helper()
		if !slices.Equal(ids(got), written) {
			t.Fatalf("%s returned rows %v, want %v", from, ids(got), written)
		}
		for i, r := range got {
			name := names[i]
			if !bytes.Equal(r.Body, bodies[name]) {
				t.Errorf("%s: body %q = %d bytes %.40q, want %d bytes %.40q", from, name, len(r.Body), r.Body, len(bodies[name]), bodies[name])
			}
			if r.Body == nil {
				t.Errorf("%s: body %q is nil, want a (possibly empty) byte slice", from, name)
			}
			if r.ContentType != recs[i].ContentType || r.Exchange != "orders" || r.RoutingKey != "order.placed" {
				t.Errorf("%s: row %d = %q %q %q, want the written exchange, routing key and content type", from, r.ID, r.Exchange, r.RoutingKey, r.ContentType)
			}
			if !reflect.DeepEqual(r.Properties, wantProps) {
				t.Errorf("%s: properties = %#v, want %#v", from, r.Properties, wantProps)
			}
			if r.CreatedAt.IsZero() || r.Attempts != 0 || r.Stuck() || !r.PublishedAt.IsZero() {
				t.Errorf("%s: fresh row %d = created %v attempts %d stuck %v published %v", from, r.ID, r.CreatedAt, r.Attempts, r.Stuck(), r.PublishedAt)
			}
		}
	}
	pending, err := b.Set.ListPending(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	check("ListPending", pending)
	check("ClaimBatch", claimBatch(t, b.Set, "relay", 100, time.Minute))
}

func foreignInsert(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	if b.InsertSQL == nil {
		t.Skip("this backend has no SQL for another language to insert with")
	}
	body := []byte{0xde, 0xad, 0xbe, 0xef, '{'}
	err := b.InsertSQL(t.Context(), "billing", "invoice.due", body, "application/x-protobuf",
		`{"message_id":"py-1","headers":{"x-origin":"python","x-n":7}}`)
	if err != nil {
		t.Fatalf("insert an outbox row with plain SQL: %v", err)
	}
	got := claimBatch(t, b.Set, "relay", 10, time.Minute)
	if len(got) != 1 {
		t.Fatalf("ClaimBatch after a plain SQL insert = %d rows, want 1", len(got))
	}
	r := got[0]
	if !bytes.Equal(r.Body, body) || r.Exchange != "billing" || r.RoutingKey != "invoice.due" || r.ContentType != "application/x-protobuf" {
		t.Errorf("row = %q %q %q %x, want billing invoice.due application/x-protobuf %x", r.Exchange, r.RoutingKey, r.ContentType, r.Body, body)
	}
	want := stores.Properties{MessageID: "py-1", Headers: map[string]any{"x-origin": "python", "x-n": json.Number("7")}}
	if !reflect.DeepEqual(r.Properties, want) {
		t.Errorf("properties = %#v, want %#v", r.Properties, want)
	}
	if r.CreatedAt.IsZero() || r.Attempts != 0 {
		t.Errorf("defaults: created_at %v attempts %d, want set and 0", r.CreatedAt, r.Attempts)
	}
	if err := b.Set.MarkPublished(t.Context(), []int64{r.ID}, "relay"); err != nil {
		t.Fatal(err)
	}
}

func batchLeased(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	var recs []stores.OutboxRecord
	for i := range 5 {
		recs = append(recs, rec(i))
	}
	written := write(t, b, recs...)
	first := claimBatch(t, b.Set, "a", 3, time.Minute)
	if !slices.Equal(ids(first), written[:3]) {
		t.Fatalf("ClaimBatch(a, 3) = %v, want the oldest three %v", ids(first), written[:3])
	}
	for _, r := range first {
		if r.LeaseOwner != "a" || r.LeaseUntil.IsZero() {
			t.Errorf("row %d leased to %q until %v, want a", r.ID, r.LeaseOwner, r.LeaseUntil)
		}
	}
	second := claimBatch(t, b.Peer(t), "b", 10, time.Minute)
	if !slices.Equal(ids(second), written[3:]) {
		t.Fatalf("ClaimBatch(b, 10) = %v, want the unleased %v", ids(second), written[3:])
	}
	if got := claimBatch(t, b.Set, "c", 10, time.Minute); len(got) != 0 {
		t.Fatalf("ClaimBatch(c) with every row leased = %v, want nothing", ids(got))
	}
	if got := pendingIDs(t, b.Set); !slices.Equal(got, written) {
		t.Fatalf("ListPending = %v, want leased rows listed too: %v", got, written)
	}
	if err := b.Set.MarkPublished(t.Context(), ids(first), "a"); err != nil {
		t.Fatalf("MarkPublished: %v", err)
	}
	if err := b.Set.MarkPublished(t.Context(), ids(first), "a"); err != nil {
		t.Fatalf("MarkPublished again (rows already published): %v", err)
	}
	if got := pendingIDs(t, b.Set); !slices.Equal(got, written[3:]) {
		t.Fatalf("ListPending after publishing = %v, want %v", got, written[3:])
	}
	if _, err := b.Set.ClaimBatch(t.Context(), "", 1, time.Minute); err == nil {
		t.Error("ClaimBatch without an owner: nil error")
	}
}

// Two relays never publish the same batch at the same time: on PostgreSQL
// this is FOR UPDATE SKIP LOCKED, and it has to hold across pools.
func concurrentRelays(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	const rows, relays = 150, 6
	var recs []stores.OutboxRecord
	for i := range rows {
		recs = append(recs, rec(i))
	}
	written := write(t, b, recs...)
	handles := []stores.Set{b.Set, b.Peer(t)}
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		seen  = map[int64]string{}
		errs  []error
	)
	for g := range relays {
		owner := fmt.Sprint("relay-", g)
		wg.Go(func() {
			<-start
			s := handles[g%2]
			for {
				rs, err := s.ClaimBatch(t.Context(), owner, 7, time.Hour)
				if err == nil && len(rs) > 0 {
					err = s.MarkPublished(t.Context(), ids(rs), owner)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", owner, err))
				}
				for _, r := range rs {
					if other, dup := seen[r.ID]; dup {
						errs = append(errs, fmt.Errorf("row %d handed to %s and %s", r.ID, other, owner))
					}
					seen[r.ID] = owner
				}
				mu.Unlock()
				if err != nil || len(rs) == 0 {
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	for _, id := range written {
		if _, ok := seen[id]; !ok {
			t.Errorf("row %d was never handed out", id)
		}
	}
	if got := pendingIDs(t, b.Set); len(got) != 0 {
		t.Errorf("ListPending after every relay finished = %v, want nothing", got)
	}
}

func relayDiesMidBatch(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	ctx := t.Context()
	written := write(t, b, rec(1), rec(2), rec(3), rec(4))
	const lease = 30 * time.Second
	batch := claimBatch(t, b.Set, "dead", 10, lease)
	if !slices.Equal(ids(batch), written) {
		t.Fatalf("ClaimBatch(dead) = %v, want %v", ids(batch), written)
	}
	// It publishes and marks the first row, then dies.
	if err := b.Set.MarkPublished(ctx, written[:1], "dead"); err != nil {
		t.Fatal(err)
	}
	peer := b.Peer(t)
	if got := claimBatch(t, peer, "next", 10, lease); len(got) != 0 {
		t.Fatalf("ClaimBatch(next) within the dead relay's lease = %v, want nothing", ids(got))
	}
	clock.Advance(lease)
	taken := claimBatch(t, peer, "next", 10, lease)
	if !slices.Equal(ids(taken), written[1:]) {
		t.Fatalf("ClaimBatch(next) after the lease expired = %v, want the unpublished rest %v", ids(taken), written[1:])
	}
	// The first relay was only slow: its marks for the lost rows are refused.
	err := b.Set.MarkPublished(ctx, written[1:], "dead")
	var lost *stores.LeaseLostError
	if !errors.Is(err, stores.ErrLeaseLost) || !errors.As(err, &lost) || !slices.Equal(lost.IDs, written[1:]) || lost.Owner != "dead" {
		t.Fatalf("MarkPublished by the relay that lost its lease = %v, want a *LeaseLostError for %v", err, written[1:])
	}
	if _, err := b.Set.MarkFailed(ctx, written[1], "dead", "late"); !errors.Is(err, stores.ErrLeaseLost) {
		t.Fatalf("MarkFailed by the relay that lost its lease = %v, want ErrLeaseLost", err)
	}
	if err := peer.MarkPublished(ctx, ids(taken), "next"); err != nil {
		t.Fatalf("MarkPublished by the relay that took over: %v", err)
	}
	if got := pendingIDs(t, b.Set); len(got) != 0 {
		t.Fatalf("ListPending = %v, want every row published", got)
	}
}

// A record nothing is bound to receive comes back unroutable, stays in the
// table and is tried again; after enough attempts it stops being handed out
// and waits, visible. It is never marked done and lost.
func failedThenStuck(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	ctx := t.Context()
	written := write(t, b, rec(1), rec(2))
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		got := claimBatch(t, b.Set, "relay", 1, time.Minute)
		if len(got) != 1 || got[0].ID != written[0] || got[0].Attempts != attempt-1 {
			t.Fatalf("attempt %d: ClaimBatch = %+v, want row %d with %d attempts", attempt, got, written[0], attempt-1)
		}
		stuck, err := b.Set.MarkFailed(ctx, written[0], "relay", fmt.Sprintf("unroutable: NO_ROUTE (attempt %d)", attempt))
		if err != nil {
			t.Fatalf("attempt %d: MarkFailed: %v", attempt, err)
		}
		if stuck != (attempt == maxAttempts) {
			t.Fatalf("attempt %d: MarkFailed stuck = %v, want %v", attempt, stuck, attempt == maxAttempts)
		}
		if attempt < maxAttempts {
			// Freed, but not handed out again before the retry delay.
			if got := claimBatch(t, b.Set, "relay", 1, time.Minute); len(got) != 1 || got[0].ID != written[1] {
				t.Fatalf("attempt %d: ClaimBatch within the retry delay = %v, want only the other row %d", attempt, ids(got), written[1])
			}
			if _, err := b.Set.MarkFailed(ctx, written[1], "relay", "skip"); err != nil {
				t.Fatal(err)
			}
			clock.Advance(retryDelay)
		}
	}
	clock.Advance(24 * time.Hour)
	for _, r := range claimBatch(t, b.Set, "relay", 10, time.Minute) {
		if r.ID == written[0] {
			t.Fatalf("ClaimBatch handed out the stuck row %d", r.ID)
		}
	}
	stuck, err := b.Set.ListStuck(ctx, 0)
	if err != nil {
		t.Fatalf("ListStuck: %v", err)
	}
	if len(stuck) != 1 || stuck[0].ID != written[0] {
		t.Fatalf("ListStuck = %v, want row %d", ids(stuck), written[0])
	}
	s := stuck[0]
	if s.Attempts != maxAttempts || !s.Stuck() || s.LastError != fmt.Sprintf("unroutable: NO_ROUTE (attempt %d)", maxAttempts) || !s.PublishedAt.IsZero() {
		t.Errorf("stuck row = attempts %d stuck %v last error %q published %v", s.Attempts, s.Stuck(), s.LastError, s.PublishedAt)
	}
	if !bytes.Equal(s.Body, rec(1).Body) {
		t.Errorf("stuck row body = %q, want %q", s.Body, rec(1).Body)
	}
	if slices.Contains(pendingIDs(t, b.Set), written[0]) {
		t.Errorf("ListPending lists the stuck row %d", written[0])
	}
}

func onlyOwnerMarks(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	ctx := t.Context()
	written := write(t, b, rec(1))
	claimBatch(t, b.Set, "owner", 1, time.Minute)
	if err := b.Set.MarkPublished(ctx, written, "intruder"); !errors.Is(err, stores.ErrLeaseLost) {
		t.Fatalf("MarkPublished by a relay without the lease = %v, want ErrLeaseLost", err)
	}
	if _, err := b.Set.MarkFailed(ctx, written[0], "intruder", "x"); !errors.Is(err, stores.ErrLeaseLost) {
		t.Fatalf("MarkFailed by a relay without the lease = %v, want ErrLeaseLost", err)
	}
	if err := b.Set.MarkPublished(ctx, []int64{written[0] + 1000}, "owner"); !errors.Is(err, stores.ErrLeaseLost) {
		t.Fatalf("MarkPublished of an unknown row = %v, want ErrLeaseLost", err)
	}
	if got := pendingIDs(t, b.Set); !slices.Equal(got, written) {
		t.Fatalf("ListPending = %v, want %v untouched", got, written)
	}
}

func purgePublished(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	ctx := t.Context()
	written := write(t, b, rec(1), rec(2))
	claimBatch(t, b.Set, "relay", 1, time.Minute)
	if err := b.Set.MarkPublished(ctx, written[:1], "relay"); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Set.PurgePublished(ctx, clock.Now()); err != nil || n != 0 {
		t.Fatalf("PurgePublished(now) = %d, %v; want 0 (published at now, not before)", n, err)
	}
	clock.Advance(time.Hour)
	if n, err := b.Set.PurgePublished(ctx, clock.Now()); err != nil || n != 1 {
		t.Fatalf("PurgePublished(an hour later) = %d, %v; want 1", n, err)
	}
	if got := pendingIDs(t, b.Set); !slices.Equal(got, written[1:]) {
		t.Fatalf("ListPending = %v, want %v", got, written[1:])
	}
}

func durableRecord(t *testing.T, open Opener, f Features) {
	if !f.Durable {
		t.Skip("this backend keeps nothing after Close")
	}
	b, _ := fixture(t, open)
	written := write(t, b, rec(1))
	if err := b.Set.Close(); err != nil {
		t.Fatal(err)
	}
	if got := pendingIDs(t, b.Peer(t)); !slices.Equal(got, written) {
		t.Fatalf("ListPending after reopening = %v, want %v", got, written)
	}
}

// A record's deliver_at is the relay's business: the store keeps it (to
// the millisecond, rounded up so that a message is never early) and hands
// the record out at once, due or not, so that the relay can put it in the
// delay ladder.
func deliverAtKept(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	later := clock.Now().Add(3*time.Second + 1500*time.Microsecond)
	wantLater := clock.Now().Add(3*time.Second + 2*time.Millisecond)
	past := clock.Now().Add(-time.Hour).In(time.FixedZone("UTC+2", 2*3600))
	now, due, gone := rec(1), rec(2), rec(3)
	due.DeliverAt, gone.DeliverAt = later, past
	written := write(t, b, now, due, gone)
	want := map[int64]time.Time{written[0]: {}, written[1]: wantLater, written[2]: past}
	check := func(from string, got []stores.OutboxRecord) {
		t.Helper()
		if !slices.Equal(ids(got), written) {
			t.Fatalf("%s returned rows %v, want every row %v, due or not", from, ids(got), written)
		}
		for _, r := range got {
			w := want[r.ID]
			if w.IsZero() != r.DeliverAt.IsZero() || !w.Equal(r.DeliverAt) {
				t.Errorf("%s: row %d deliver_at = %v, want %v", from, r.ID, r.DeliverAt, w)
			}
		}
	}
	pending, err := b.Set.ListPending(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	check("ListPending", pending)
	if locker, ok := b.Set.(stores.OutboxLocker); ok {
		lb, err := locker.ClaimLocked(t.Context(), "locker", 10, time.Minute)
		if err != nil {
			t.Fatalf("ClaimLocked: %v", err)
		}
		check("ClaimLocked", lb.Records())
		lb.Abort()
	}
	claimed := claimBatch(t, b.Set, "relay", 10, time.Minute)
	check("ClaimBatch", claimed)
	if err := b.Set.MarkPublished(t.Context(), ids(claimed), "relay"); err != nil {
		t.Fatalf("MarkPublished: %v", err)
	}
}

func traceParentKept(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	fromCaller, err := b.WriteOutbox(ctx, true, rec(1))
	if err != nil {
		t.Fatalf("write an outbox record in a traced context: %v", err)
	}
	own := rec(2)
	own.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	written := append(fromCaller, write(t, b, own, rec(3))...)
	want := map[int64]string{
		written[0]: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		written[1]: own.TraceParent,
		written[2]: "",
	}
	check := func(from string, got []stores.OutboxRecord) {
		t.Helper()
		if !slices.Equal(ids(got), written) {
			t.Fatalf("%s returned rows %v, want %v", from, ids(got), written)
		}
		for _, r := range got {
			if r.TraceParent != want[r.ID] {
				t.Errorf("%s: row %d traceparent = %q, want %q", from, r.ID, r.TraceParent, want[r.ID])
			}
		}
	}
	pending, err := b.Set.ListPending(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	check("ListPending", pending)
	if locker, ok := b.Set.(stores.OutboxLocker); ok {
		lb, err := locker.ClaimLocked(t.Context(), "locker", 10, time.Minute)
		if err != nil {
			t.Fatalf("ClaimLocked: %v", err)
		}
		check("ClaimLocked", lb.Records())
		lb.Abort()
	}
	check("ClaimBatch", claimBatch(t, b.Set, "relay", 10, time.Minute))
}
