package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/stores/sqlite"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// relayEnv is one relay test's broker: a prefix of its own, a topology
// connection, and everything declared deleted in t.Cleanup.
type relayEnv struct {
	t    *testing.T
	url  string
	ns   string
	topo *broker.Topology
	log  *slog.Logger
	logs *strings.Builder
	mu   sync.Mutex
}

func newRelayEnv(t *testing.T) *relayEnv {
	t.Helper()
	e := &relayEnv{t: t, url: testenv.AMQP(t), ns: testenv.Names(t), logs: &strings.Builder{}}
	e.log = slog.New(slog.NewTextHandler(lockedWriter{e}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.topo = broker.NewTopology(e.conn("topology"), e.log)
	t.Cleanup(func() { e.topo.Close() })
	t.Cleanup(func() {
		if t.Failed() {
			e.mu.Lock()
			t.Logf("logs:\n%s", e.logs.String())
			e.mu.Unlock()
		}
	})
	return e
}

type lockedWriter struct{ e *relayEnv }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.e.mu.Lock()
	defer w.e.mu.Unlock()
	return w.e.logs.Write(p)
}

func (e *relayEnv) conn(role string) *broker.Conn {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := broker.Open(ctx, e.url, broker.ConnOptions{Name: e.ns + "-" + role, Log: e.log})
	if err != nil {
		e.t.Fatalf("broker.Open(%s): %v", role, err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

func (e *relayEnv) publisher(role string) *broker.Publisher {
	e.t.Helper()
	p, err := broker.OpenPublisher(e.t.Context(), e.conn(role), broker.PublisherOptions{Log: e.log})
	if err != nil {
		e.t.Fatalf("OpenPublisher: %v", err)
	}
	e.t.Cleanup(func() { p.Close() })
	return p
}

func (e *relayEnv) queue(name string) string {
	e.t.Helper()
	q := e.ns + "-" + name
	if err := e.topo.DeclareQueue(e.t.Context(), broker.Queue{Name: q, Durable: true, Args: map[string]any{"x-queue-type": "quorum"}}); err != nil {
		e.t.Fatalf("DeclareQueue(%s): %v", q, err)
	}
	e.t.Cleanup(func() { e.topo.DeleteQueue(context.Background(), q) })
	return q
}

func (e *relayEnv) exchange(name string) string {
	e.t.Helper()
	x := e.ns + "-" + name
	if err := e.topo.DeclareExchange(e.t.Context(), broker.Exchange{Name: x, Kind: "direct", Durable: true}); err != nil {
		e.t.Fatalf("DeclareExchange(%s): %v", x, err)
	}
	e.t.Cleanup(func() { e.topo.DeleteExchange(context.Background(), x) })
	return x
}

// consume delivers every message of queue on the returned channel until the
// test ends; deliveries are acknowledged.
func (e *relayEnv) consume(queue string) <-chan amqp.Delivery {
	e.t.Helper()
	c, err := amqp.DialConfig(e.url, amqp.Config{Properties: amqp.Table{"connection_name": e.ns + "-consume"}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	dels, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return dels
}

// receive takes n deliveries, failing the test after 30s.
func receive(t *testing.T, dels <-chan amqp.Delivery, n int) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case d := <-dels:
			out = append(out, d)
		case <-timeout:
			t.Fatalf("received %d of %d messages within 30s", len(out), n)
		}
	}
	return out
}

// runRelay runs r until the test ends or the returned stop is called; stop
// waits for Run to return.
func runRelay(t *testing.T, r *Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Relay.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// watchedStore reports what the relay does to the outbox.
type watchedStore struct {
	relayStore
	claimed chan int     // records per ClaimBatch
	marked  chan []int64 // ids per successful MarkPublished
	failed  chan bool    // stuck, per successful MarkFailed
	// beforeMark, when set, runs before each MarkPublished; an error it
	// returns is the mark's outcome.
	beforeMark func(ids []int64) error
}

func watch(s relayStore) *watchedStore {
	return &watchedStore{relayStore: s, claimed: make(chan int, 10000), marked: make(chan []int64, 10000), failed: make(chan bool, 10000)}
}

// lockWatchedStore is a watchedStore over a store that claims with locks:
// each finished batch reports what ClaimBatch, MarkPublished and MarkFailed
// report in the leased protocol, and beforeMark runs before each Finish (an
// error it returns aborts the batch instead).
type lockWatchedStore struct {
	*watchedStore
	locker relayLocker
}

// watchLocked watches s, which must claim with locks.
func watchLocked(s relayStore) *lockWatchedStore {
	return &lockWatchedStore{watchedStore: watch(s), locker: s.(relayLocker)}
}

func (w *lockWatchedStore) ClaimLocked(ctx context.Context, owner string, n int, lease time.Duration) (stores.LockedBatch, error) {
	lb, err := w.locker.ClaimLocked(ctx, owner, n, lease)
	if err != nil {
		return nil, err
	}
	w.claimed <- len(lb.Records())
	return &watchedBatch{LockedBatch: lb, w: w.watchedStore}, nil
}

type watchedBatch struct {
	stores.LockedBatch
	w *watchedStore
}

func (b *watchedBatch) Finish(ctx context.Context, published []int64, failed []stores.FailedRecord) ([]int64, error) {
	if b.w.beforeMark != nil {
		if err := b.w.beforeMark(published); err != nil {
			b.Abort()
			return nil, err
		}
	}
	stuck, err := b.LockedBatch.Finish(ctx, published, failed)
	if err != nil {
		return nil, err
	}
	if len(published) > 0 {
		b.w.marked <- published
	}
	for _, f := range failed {
		b.w.failed <- slices.Contains(stuck, f.ID)
	}
	return stuck, nil
}

func (w *watchedStore) ClaimBatch(ctx context.Context, owner string, n int, lease time.Duration) ([]stores.OutboxRecord, error) {
	recs, err := w.relayStore.ClaimBatch(ctx, owner, n, lease)
	if err == nil {
		w.claimed <- len(recs)
	}
	return recs, err
}

func (w *watchedStore) MarkPublished(ctx context.Context, ids []int64, owner string) error {
	if w.beforeMark != nil {
		if err := w.beforeMark(ids); err != nil {
			return err
		}
	}
	err := w.relayStore.MarkPublished(ctx, ids, owner)
	if err == nil {
		w.marked <- ids
	}
	return err
}

func (w *watchedStore) MarkFailed(ctx context.Context, id int64, owner, reason string) (bool, error) {
	stuck, err := w.relayStore.MarkFailed(ctx, id, owner, reason)
	if err == nil {
		w.failed <- stuck
	}
	return stuck, err
}

// nextClaim returns the size of the relay's next claim.
func nextClaim(t *testing.T, ws *watchedStore) int {
	t.Helper()
	select {
	case n := <-ws.claimed:
		return n
	case <-time.After(30 * time.Second):
		t.Fatal("the relay claimed nothing for 30s")
		return 0
	}
}

// waitMarked waits until n records in all were marked published.
func waitMarked(t *testing.T, marked <-chan []int64, n int) {
	t.Helper()
	got := 0
	timeout := time.After(60 * time.Second)
	for got < n {
		select {
		case ids := <-marked:
			got += len(ids)
		case <-timeout:
			t.Fatalf("%d of %d records marked published within 60s", got, n)
		}
	}
}

// addSQLite writes recs in one transaction on the store's file.
func addSQLite(t *testing.T, s *sqlite.Store, recs ...stores.OutboxRecord) {
	t.Helper()
	tx, err := s.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if _, err := s.Outbox().Add(t.Context(), tx, r); err != nil {
			tx.Rollback()
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func records(n int, queue string) []stores.OutboxRecord {
	out := make([]stores.OutboxRecord, n)
	for i := range out {
		out[i] = stores.OutboxRecord{RoutingKey: queue, Body: fmt.Appendf(nil, `{"order":%d}`, i),
			ContentType: "application/json", Properties: stores.Properties{MessageID: fmt.Sprint("o-", i)}}
	}
	return out
}

// heldPublisher passes publishes through, but holds each outcome until
// release is closed, reporting on confirmed when the broker answered.
type heldPublisher struct {
	inner     *broker.Publisher
	release   chan struct{}
	confirmed chan error
	wg        sync.WaitGroup
}

func (h *heldPublisher) PublishFunc(ctx context.Context, msg broker.Message, done func(error)) error {
	return h.inner.PublishFunc(ctx, msg, func(err error) {
		h.confirmed <- err
		h.wg.Go(func() {
			<-h.release
			done(err)
		})
	})
}

func TestRelayPublishesBytesUnchangedAndMarksOnlyAfterConfirm(t *testing.T) {
	e := newRelayEnv(t)
	q := e.queue("out")
	dels := e.consume(q)
	st := storetest.OpenSQLite(t, stores.Options{})

	binary := []byte{0x00, 0xff, 0xfe, '{', '"', 0x80, 0x0a, 0xc3, 0x28}
	jsonString := []byte(`"already encoded \"json\" text"`)
	ts := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := []stores.OutboxRecord{
		{RoutingKey: q, Body: binary, ContentType: "application/octet-stream", Properties: stores.Properties{
			MessageID: "bin-1", CorrelationID: "c-7", ReplyTo: "replies", Type: "blob.stored", AppID: "billing",
			ContentEncoding: "identity", Expiration: "600000", Priority: 3, DeliveryMode: 2, Timestamp: ts.Unix(),
			Headers: map[string]any{
				"x-tenant": "acme", "x-version": 3, "x-ratio": 1.5, "x-flag": true, "x-none": nil,
				"x-big": int64(1) << 60, "x-list": []any{1, "a", false}, "x-nested": map[string]any{"k": "v", "n": 2},
			},
		}},
		{RoutingKey: q, Body: jsonString, ContentType: "application/json", Properties: stores.Properties{MessageID: "json-1"}},
		{RoutingKey: q, Body: []byte{}, Properties: stores.Properties{MessageID: "empty-1"}},
	}
	addSQLite(t, st, recs...)

	ws := watch(st)
	pub := &heldPublisher{inner: e.publisher("relay"), release: make(chan struct{}), confirmed: make(chan error, 10)}
	var released sync.Once
	release := func() { released.Do(func() { close(pub.release) }) }
	t.Cleanup(func() {
		release()
		pub.wg.Wait()
	})
	r, err := New(ws, pub, Options{Poll: 10 * time.Millisecond, Log: e.log})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)

	got := receive(t, dels, len(recs))
	for range recs {
		if err := <-pub.confirmed; err != nil {
			t.Fatalf("publish outcome %v, want confirmed and routed", err)
		}
	}
	// Confirmed by the broker, outcome not yet delivered to the relay:
	// nothing may be marked.
	pending, err := st.ListPending(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != len(recs) {
		t.Fatalf("before the relay saw the confirms, %d records pending, want %d (marked before confirm?)", len(pending), len(recs))
	}
	release()
	waitMarked(t, ws.marked, len(recs))
	if pending, _ := st.ListPending(t.Context(), 0); len(pending) != 0 {
		t.Errorf("after the confirms, %d records still pending, want 0", len(pending))
	}

	byID := map[string]amqp.Delivery{}
	for _, d := range got {
		byID[d.MessageId] = d
	}
	d := byID["bin-1"]
	if !bytes.Equal(d.Body, binary) {
		t.Errorf("binary body arrived as %x, want %x", d.Body, binary)
	}
	wantHeaders := amqp.Table{
		"x-tenant": "acme", "x-version": int64(3), "x-ratio": 1.5, "x-flag": true, "x-none": nil,
		"x-big": int64(1) << 60, "x-list": []any{int64(1), "a", false}, "x-nested": amqp.Table{"k": "v", "n": int64(2)},
	}
	if !reflect.DeepEqual(d.Headers, wantHeaders) {
		t.Errorf("headers arrived as %#v, want %#v", d.Headers, wantHeaders)
	}
	props := []struct{ name, got, want string }{
		{"content_type", d.ContentType, "application/octet-stream"},
		{"correlation_id", d.CorrelationId, "c-7"},
		{"reply_to", d.ReplyTo, "replies"},
		{"type", d.Type, "blob.stored"},
		{"app_id", d.AppId, "billing"},
		{"content_encoding", d.ContentEncoding, "identity"},
		{"expiration", d.Expiration, "600000"},
		{"priority", fmt.Sprint(d.Priority), "3"},
		{"delivery_mode", fmt.Sprint(d.DeliveryMode), "2"},
		{"timestamp", d.Timestamp.UTC().String(), ts.String()},
	}
	for _, p := range props {
		if p.got != p.want {
			t.Errorf("property %s arrived as %q, want %q", p.name, p.got, p.want)
		}
	}
	// The double-encoding bug: a JSON text must not become a JSON string of
	// itself.
	if d := byID["json-1"]; !bytes.Equal(d.Body, jsonString) || d.ContentType != "application/json" {
		t.Errorf("JSON body arrived as %q (%s), want %q unchanged", d.Body, d.ContentType, jsonString)
	}
	if d := byID["empty-1"]; len(d.Body) != 0 || d.DeliveryMode != amqp.Persistent {
		t.Errorf("empty record arrived with body %q and delivery mode %d, want empty and persistent", d.Body, d.DeliveryMode)
	}
}

// TestRelayUnroutableRecordBecomesStuck runs on a store that leases
// (SQLite) and on one that claims with locks (PostgreSQL).
func TestRelayUnroutableRecordBecomesStuck(t *testing.T) {
	const limit = 3
	opts := stores.Options{OutboxMaxAttempts: limit, OutboxRetryDelay: time.Millisecond}
	rec := func(x string) stores.OutboxRecord {
		return stores.OutboxRecord{Exchange: x, RoutingKey: "order.placed", Body: []byte(`{}`), Properties: stores.Properties{MessageID: "o-1"}}
	}
	t.Run("leased", func(t *testing.T) {
		e := newRelayEnv(t)
		x := e.exchange("orders") // nothing bound
		st := storetest.OpenSQLite(t, opts)
		addSQLite(t, st, rec(x))
		ws := watch(st)
		unroutableBecomesStuck(t, e, st, ws, ws, limit)
	})
	t.Run("locked", func(t *testing.T) {
		e := newRelayEnv(t)
		x := e.exchange("orders")
		st := storetest.OpenPostgres(t, opts)
		storetest.AddPostgres(t, st, rec(x))
		lw := watchLocked(st)
		unroutableBecomesStuck(t, e, st, lw, lw.watchedStore, limit)
	})
}

// waitFailedUntilStuck waits for limit failures of one record, the last
// (and only the last) making it stuck.
func waitFailedUntilStuck(t *testing.T, ws *watchedStore, limit int, what string) {
	t.Helper()
	for i := 1; i <= limit; i++ {
		select {
		case stuck := <-ws.failed:
			if stuck != (i == limit) {
				t.Fatalf("failure %d of %s: stuck = %v, want %v", i, what, stuck, i == limit)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("failure %d of %s not recorded within 30s", i, what)
		}
	}
}

func unroutableBecomesStuck(t *testing.T, e *relayEnv, st stores.OutboxRelay, rs relayStore, ws *watchedStore, limit int) {
	r, err := New(rs, e.publisher("relay"), Options{Poll: 5 * time.Millisecond, Exchanges: e.topo, Log: e.log})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	waitFailedUntilStuck(t, ws, limit, "the unroutable record")
	// A stuck record is no longer handed out: it was claimed once per
	// attempt, and further claims find nothing.
	handed := 0
	for drained := false; !drained; {
		select {
		case n := <-ws.claimed:
			handed += n
		default:
			drained = true
		}
	}
	if handed != limit {
		t.Errorf("the record was handed out %d times, want %d", handed, limit)
	}
	for range 3 {
		if n := nextClaim(t, ws); n != 0 {
			t.Fatalf("a claim after the record got stuck returned %d records, want 0", n)
		}
	}
	stuck, err := st.ListStuck(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stuck) != 1 || stuck[0].Attempts != limit || !strings.Contains(stuck[0].LastError, "reached no queue") {
		t.Fatalf("ListStuck = %+v, want the record with %d attempts and an unroutable reason", stuck, limit)
	}
	if pending, _ := st.ListPending(t.Context(), 0); len(pending) != 0 {
		t.Errorf("ListPending = %d records, want 0 (stuck records are listed apart)", len(pending))
	}
	if s := r.Stats(); s.Published != 0 || s.Failed != int64(limit) || s.Stuck != 1 {
		t.Errorf("Stats() = %+v, want 0 published, %d failed, 1 stuck", s, limit)
	}
}

// TestRelayUnreadablePropertiesFailOnlyTheirRecord writes, among good
// records, a row whose properties column holds a value of the wrong type,
// as a program in another language may: the relay publishes the others
// and the row ends stuck with the reason, on a leasing store (SQLite) and
// on one that claims with locks (PostgreSQL). A store that failed the
// whole claim on that row held up every record claimed with it forever.
func TestRelayUnreadablePropertiesFailOnlyTheirRecord(t *testing.T) {
	const limit = 2
	opts := stores.Options{OutboxMaxAttempts: limit, OutboxRetryDelay: time.Millisecond}
	const badProps = `{"message_id": "bad-1", "priority": "high"}`
	t.Run("leased", func(t *testing.T) {
		e := newRelayEnv(t)
		q := e.queue("out")
		st := storetest.OpenSQLite(t, opts)
		recs := records(20, q)
		addSQLite(t, st, recs[:10]...)
		if _, err := st.DB().ExecContext(t.Context(), `INSERT INTO acemq_outbox (routing_key, body, properties) VALUES (?, ?, ?)`,
			q, []byte(`{}`), badProps); err != nil {
			t.Fatal(err)
		}
		addSQLite(t, st, recs[10:]...)
		ws := watch(st)
		unreadableFailsAlone(t, e, q, st, ws, ws, limit)
	})
	t.Run("locked", func(t *testing.T) {
		e := newRelayEnv(t)
		q := e.queue("out")
		st := storetest.OpenPostgres(t, opts)
		recs := records(20, q)
		storetest.AddPostgres(t, st, recs[:10]...)
		if _, err := st.Pool().Exec(t.Context(), `INSERT INTO acemq_outbox (routing_key, body, properties) VALUES ($1, $2, $3::jsonb)`,
			q, []byte(`{}`), badProps); err != nil {
			t.Fatal(err)
		}
		storetest.AddPostgres(t, st, recs[10:]...)
		lw := watchLocked(st)
		unreadableFailsAlone(t, e, q, st, lw, lw.watchedStore, limit)
	})
}

func unreadableFailsAlone(t *testing.T, e *relayEnv, q string, st stores.OutboxRelay, rs relayStore, ws *watchedStore, limit int) {
	dels := e.consume(q)
	r, err := New(rs, e.publisher("relay"), Options{Poll: 5 * time.Millisecond, Exchanges: e.topo, Log: e.log})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	for _, d := range receive(t, dels, 20) {
		if d.MessageId == "bad-1" {
			t.Errorf("the row with unreadable properties was published")
		}
	}
	waitMarked(t, ws.marked, 20)
	waitFailedUntilStuck(t, ws, limit, "the unreadable row")
	stuck, err := st.ListStuck(t.Context(), 0)
	if err != nil {
		t.Fatalf("ListStuck: %v (an unreadable row must not fail the listing)", err)
	}
	if len(stuck) != 1 || stuck[0].Invalid == nil || !strings.Contains(stuck[0].LastError, "priority") ||
		!strings.Contains(stuck[0].LastError, "properties column") {
		t.Fatalf("ListStuck = %+v, want the unreadable row, marked invalid, its reason naming the priority and the properties column", stuck)
	}
}

func TestRelayMissingExchangeFailsOnlyItsRecord(t *testing.T) {
	e := newRelayEnv(t)
	q := e.queue("out")
	dels := e.consume(q)
	st := storetest.OpenSQLite(t, stores.Options{})
	recs := records(20, q)
	// In the middle of the batch, a record for an exchange nobody declared.
	recs[10] = stores.OutboxRecord{Exchange: e.ns + "-missing", RoutingKey: "k", Body: []byte(`{}`), Properties: stores.Properties{MessageID: "lost-1"}}
	addSQLite(t, st, recs...)

	ws := watch(st)
	pub := e.publisher("relay")
	r, err := New(ws, pub, Options{Poll: 5 * time.Millisecond, Exchanges: e.topo, Log: e.log})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	receive(t, dels, 19)
	waitMarked(t, ws.marked, 19)
	if stuck := <-ws.failed; stuck {
		t.Error("the first failure of the record marked it stuck")
	}
	if s := pub.Stats(); s.Channels != 1 || s.Indeterminate != 0 {
		t.Errorf("publisher stats %+v: want one channel and no indeterminate publish (the missing exchange must not close the channel)", s)
	}
}

// TestRelayTwoRelaysNeverPublishARowTwice runs two relays, each with its own
// store pool and broker connection, on one PostgreSQL outbox. In a steady
// state (no relay dies, no lease expires) every record is published exactly
// once.
// TestRelayTwoRelaysNeverPublishARowTwice runs two relays on one
// PostgreSQL outbox, both leasing rows or both holding them by locks.
func TestRelayTwoRelaysNeverPublishARowTwice(t *testing.T) {
	t.Run("leased", func(t *testing.T) { twoRelays(t, false) })
	t.Run("locked", func(t *testing.T) { twoRelays(t, true) })
}

func twoRelays(t *testing.T, locked bool) {
	e := newRelayEnv(t)
	q := e.queue("out")
	u := testenv.PostgresSchema(t)
	sa := storetest.OpenPostgresURL(t, u, stores.Options{})
	if err := sa.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	sb := storetest.OpenPostgresURL(t, u, stores.Options{})
	const n = 1000
	storetest.AddPostgres(t, sa, records(n, q)...)

	marked := make(chan []int64, 1000)
	var relays []*Relay
	var stops []func()
	for i, s := range []*postgres.Store{sa, sb} {
		var ws *watchedStore
		var rs relayStore
		if locked {
			lw := watchLocked(s)
			ws, rs = lw.watchedStore, lw
		} else {
			ws = watch(s)
			rs = ws
		}
		ws.marked = marked
		r, err := New(rs, e.publisher(fmt.Sprint("relay-", i)), Options{Batch: 50, Poll: 5 * time.Millisecond, Log: e.log})
		if err != nil {
			t.Fatal(err)
		}
		relays = append(relays, r)
		stops = append(stops, runRelay(t, r))
	}
	waitMarked(t, marked, n)
	for _, stop := range stops {
		stop()
	}
	var published, left, lost int64
	for _, r := range relays {
		s := r.Stats()
		published, left, lost = published+s.Published, left+s.Left, lost+s.LeaseLost
		t.Logf("relay %s: %+v", r.Owner(), s)
	}
	if published != n || left != 0 || lost != 0 {
		t.Errorf("relays published %d, left %d, lost the lease on %d; want %d, 0, 0", published, left, lost, n)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		d, err := e.topo.Depth(context.Background(), q)
		if err != nil || d != n {
			return fmt.Errorf("queue %s holds %d messages (%v), want exactly %d", q, d, err, n)
		}
		return nil
	})
	seen := map[string]int{}
	for _, d := range receive(t, e.consume(q), n) {
		seen[d.MessageId]++
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("message %s published %d times, want once", id, c)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct messages, want %d", len(seen), n)
	}
}

// TestRelayKilledMidBatchIsTakenOverAfterLease kills a relay when its first
// marks are due (its context ends and the store refuses everything after),
// so the records it published stay unmarked under its lease. Another relay
// gets nothing until the lease has passed on the store's clock, then
// publishes every record: none lost, those the first relay published twice.
func TestRelayKilledMidBatchIsTakenOverAfterLease(t *testing.T) {
	e := newRelayEnv(t)
	q := e.queue("out")
	dels := e.consume(q)
	clock := testenv.NewClock()
	st := storetest.OpenPostgres(t, stores.Options{Now: clock.Now})
	const n, lease = 200, 15 * time.Second
	storetest.AddPostgres(t, st, records(n, q)...)

	killed := watch(st)
	ctx, cancel := context.WithCancel(context.Background())
	var dead sync.Once
	deadErr := errors.New("the relay process was killed")
	killed.beforeMark = func([]int64) error {
		dead.Do(cancel)
		return deadErr
	}
	first, err := New(killed, e.publisher("first"), Options{Owner: "first", Lease: lease, Poll: 5 * time.Millisecond, Log: e.log})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Run(ctx); err != nil {
		t.Fatal(err)
	}
	s1 := first.Stats()
	if s1.Claimed == 0 || s1.Published != 0 || s1.Left != s1.Claimed {
		t.Fatalf("killed relay: %+v; want records claimed, none marked published, all left to their lease", s1)
	}
	pending, err := st.ListPending(t.Context(), 0)
	if err != nil || len(pending) != n {
		t.Fatalf("after the kill ListPending = %d records (%v), want all %d", len(pending), err, n)
	}

	ws := watch(st)
	second, err := New(ws, e.publisher("second"), Options{Owner: "second", Lease: lease, Poll: 5 * time.Millisecond, Log: e.log})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, second)
	// While the lease holds, the second relay gets only what the first never
	// claimed.
	unclaimed := 0
	for _, rec := range pending {
		if rec.LeaseOwner != "first" {
			unclaimed++
		}
	}
	if unclaimed == n {
		t.Fatal("after the kill no record is leased to the killed relay")
	}
	got := 0
	for got < unclaimed {
		got += nextClaim(t, ws)
	}
	if c := nextClaim(t, ws); c != 0 {
		t.Fatalf("the second relay claimed %d records still leased to the first", c)
	}
	clock.Advance(lease + time.Second)
	waitMarked(t, ws.marked, n)

	// Every record arrives at least once; those the first relay published
	// arrive twice, which idempotent consumers absorb.
	seen := map[string]bool{}
	timeout := time.After(30 * time.Second)
	for len(seen) < n {
		select {
		case d := <-dels:
			seen[d.MessageId] = true
		case <-timeout:
			t.Fatalf("%d of %d records arrived within 30s", len(seen), n)
		}
	}
	if pending, _ := st.ListPending(t.Context(), 0); len(pending) != 0 {
		t.Errorf("after the takeover %d records pending, want 0", len(pending))
	}
}

// TestRelayLockedBatchHeldPastItsLeaseIsTakenOver hangs a relay that holds
// its batch by locks just before it finishes the batch. While its
// transaction lasts a second relay gets none of those rows; once the
// database ends the idle transaction after the lease, the second relay
// publishes them all, and the first relay's finish is refused as a lost
// lease: every record arrives, none is marked twice.
func TestRelayLockedBatchHeldPastItsLeaseIsTakenOver(t *testing.T) {
	e := newRelayEnv(t)
	q := e.queue("out")
	dels := e.consume(q)
	st := storetest.OpenPostgres(t, stores.Options{})
	const n, lease = 30, 2 * time.Second
	storetest.AddPostgres(t, st, records(n, q)...)

	hung := &claimOnce{lockWatchedStore: watchLocked(st)}
	hanging, release := make(chan []int64, 1), make(chan struct{})
	hung.beforeMark = func(ids []int64) error {
		hanging <- ids
		<-release
		return nil
	}
	first, err := New(hung, e.publisher("first"), Options{Owner: "first", Batch: n, Lease: lease, Poll: 5 * time.Millisecond, Log: e.log})
	if err != nil {
		t.Fatal(err)
	}
	stopFirst := runRelay(t, first)
	defer close(release)
	select {
	case ids := <-hanging:
		if len(ids) != n {
			t.Fatalf("the first relay published %d records before it hung, want all %d", len(ids), n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first relay did not publish its batch within 30s")
	}

	second := watchLocked(st)
	r2, err := New(second, e.publisher("second"), Options{Owner: "second", Lease: time.Minute, Poll: 5 * time.Millisecond, Log: e.log})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	runRelay(t, r2)
	// The first claims come well within the lease: the rows are locked.
	for range 3 {
		if c := nextClaim(t, second.watchedStore); c != 0 && time.Since(start) < lease {
			t.Fatalf("the second relay claimed %d rows the first relay holds", c)
		}
	}
	waitMarked(t, second.marked, n)
	release <- struct{}{}
	stopFirst()
	if s := first.Stats(); s.Published != 0 || s.LeaseLost != n {
		t.Errorf("hung relay: %+v; want nothing published by it and its %d records' lease lost", s, n)
	}
	if s := r2.Stats(); s.Published != n {
		t.Errorf("second relay: %+v; want %d published", s, n)
	}
	seen := map[string]int{}
	timeout := time.After(30 * time.Second)
	for len(seen) < n || seen["o-0"] < 2 {
		select {
		case d := <-dels:
			seen[d.MessageId]++
		case <-timeout:
			t.Fatalf("%d of %d records arrived within 30s (o-0: %d times, want 2)", len(seen), n, seen["o-0"])
		}
	}
	if pending, _ := st.ListPending(t.Context(), 0); len(pending) != 0 {
		t.Errorf("after the takeover %d records pending, want 0", len(pending))
	}
}

// claimOnce claims one batch, then refuses every claim, as a relay that
// hangs does.
type claimOnce struct {
	*lockWatchedStore
	done atomic.Bool
}

func (c *claimOnce) ClaimLocked(ctx context.Context, owner string, n int, lease time.Duration) (stores.LockedBatch, error) {
	if c.done.Swap(true) {
		return nil, errors.New("the relay hangs")
	}
	return c.lockWatchedStore.ClaimLocked(ctx, owner, n, lease)
}

func TestRelayHeaderValues(t *testing.T) {
	cases := []struct {
		name string
		in   any
		want any
	}{
		{"an integer is a signed 64-bit integer", jsonNumber("42"), int64(42)},
		{"a negative integer stays negative", jsonNumber("-7"), int64(-7)},
		{"a fraction is a double", jsonNumber("1.25"), 1.25},
		{"an integer too large for 64 bits is a double", jsonNumber("18446744073709551616"), 18446744073709551616.0},
		{"a number no double holds keeps its text", jsonNumber("1e400"), "1e400"},
		{"a string stays a string, even a numeric one", "007", "007"},
		{"null is void", nil, nil},
		{"an array is a field array", []any{jsonNumber("1"), "x"}, []any{int64(1), "x"}},
		{"an object is a table", map[string]any{"a": map[string]any{}}, amqp.Table{"a": amqp.Table{}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := headerValue(tc.in)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("headerValue(%#v) = %#v, %v; want %#v", tc.in, got, err, tc.want)
			}
		})
	}
}

func jsonNumber(s string) any { return json.Number(s) }

// BenchmarkRelay compares the outbox relay with raw amqp091-go publishing
// the same messages (1 KiB bodies, persistent, mandatory, to one quorum
// queue) with pipelined confirms and the same window. The relay reads the
// records from the store ACEMQ_BENCH_STORE names ("postgres", the default,
// on ACEMQ_TEST_POSTGRES_URL; or "sqlite", a file under the test's temporary
// directory), publishes them and marks them published; its rate counts until
// the last mark. Each run moves ACEMQ_BENCH_MESSAGES records (20,000: a
// run lasts about a second, so that starting and the last mark are a small
// part of it). It prints the medians of five rounds after a warm-up round
// that is not counted, the ratio being the median of the rounds' ratios
// (each relay run against the raw run just before it), with their spread;
// ACEMQ_BENCH_VERBOSE=1 prints every round, and ACEMQ_BENCH_RELAY_BATCH sets
// the relay's Batch (Options' default otherwise):
//
//	bench: publish-raw <n> msgs/s
//	bench: relay <n> msgs/s raw=<n> ratio=<x.xx> spread=<min>–<max>
func BenchmarkRelay(b *testing.B) {
	if only := os.Getenv("ACEMQ_BENCH_ONLY"); only != "" && only != "relay" {
		b.Skip("ACEMQ_BENCH_ONLY=" + only)
	}
	url := testenv.AMQP(b)
	ns := testenv.Names(b)
	const (
		rounds = 5
		window = 256
	)
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("ACEMQ_BENCH_MESSAGES")); err == nil && v > 0 {
		n = v
	}
	batch := 0 // Options' default
	if v, err := strconv.Atoi(os.Getenv("ACEMQ_BENCH_RELAY_BATCH")); err == nil && v > 0 {
		batch = v
	}
	ctx := context.Background()
	conn, err := broker.Open(ctx, url, broker.ConnOptions{Name: ns + "-relay"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	topo := broker.NewTopology(conn, nil)
	b.Cleanup(func() { topo.Close() })
	q := ns + "-out"
	if err := topo.DeclareQueue(ctx, broker.Queue{Name: q, Durable: true, Args: map[string]any{"x-queue-type": "quorum"}}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { topo.DeleteQueue(context.Background(), q) })
	pub, err := broker.OpenPublisher(ctx, conn, broker.PublisherOptions{Window: window})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pub.Close() })

	kind, store, add := benchStore(b)
	b.Logf("relay store: %s", kind)
	body := make([]byte, 1024)
	recs := make([]stores.OutboxRecord, n)
	for i := range recs {
		recs[i] = stores.OutboxRecord{RoutingKey: q, Body: body, ContentType: "application/octet-stream",
			Properties: stores.Properties{MessageID: fmt.Sprint("o-", i)}}
	}
	purge := func() {
		testenv.Eventually(b, 60*time.Second, func() error {
			d, err := topo.Depth(ctx, q)
			if err != nil || d != n {
				return fmt.Errorf("queue %s holds %d messages (%v), want %d", q, d, err, n)
			}
			return nil
		})
		if _, err := topo.DeleteQueue(ctx, q); err != nil {
			b.Fatal(err)
		}
		if err := topo.DeclareQueue(ctx, broker.Queue{Name: q, Durable: true, Args: map[string]any{"x-queue-type": "quorum"}}); err != nil {
			b.Fatal(err)
		}
	}

	var raw, ours []float64
	for round := range rounds + 1 {
		rawRun := rawPublish(b, url, ns, q, body, n, window)
		purge()
		add(recs)
		var ws *watchedStore
		var rs relayStore
		if _, ok := store.(relayLocker); ok {
			lw := watchLocked(store)
			ws, rs = lw.watchedStore, lw
		} else {
			ws = watch(store)
			rs = ws
		}
		r, err := New(rs, pub, Options{Batch: batch})
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- r.Run(rctx) }()
		got := 0
		for got < n {
			select {
			case ids := <-ws.marked:
				got += len(ids)
			case <-time.After(60 * time.Second):
				b.Fatalf("relay marked %d of %d records within 60s", got, n)
			}
		}
		ourRun := float64(n) / time.Since(start).Seconds()
		cancel()
		<-done
		purge()
		if os.Getenv("ACEMQ_BENCH_VERBOSE") != "" {
			fmt.Printf("bench: round %d relay %.0f msgs/s raw=%.0f ratio=%.2f warm-up=%v\n", round, ourRun, rawRun, ourRun/rawRun, round == 0)
		}
		if round > 0 { // the first round is a warm-up
			raw, ours = append(raw, rawRun), append(ours, ourRun)
		}
	}
	// Each round's relay run is paired with the raw run just before it:
	// the machine's speed drifts by more than the difference measured.
	ratios := make([]float64, len(raw))
	for i := range raw {
		ratios[i] = ours[i] / raw[i]
	}
	rm, om, ratio := medianOf(raw), medianOf(ours), medianOf(ratios)
	fmt.Printf("bench: publish-raw %.0f msgs/s\n", rm)
	fmt.Printf("bench: relay %.0f msgs/s raw=%.0f ratio=%.2f spread=%.2f–%.2f\n", om, rm, ratio, slices.Min(ratios), slices.Max(ratios))
	b.ReportMetric(om, "msgs/s")
	b.ReportMetric(ratio, "ratio")
}

// benchStore opens the store BenchmarkRelay reads, and returns a function
// that writes records to it.
func benchStore(b *testing.B) (string, relayStore, func([]stores.OutboxRecord)) {
	b.Helper()
	switch kind := envOrDefault("ACEMQ_BENCH_STORE", "postgres"); kind {
	case "postgres":
		s := storetest.OpenPostgres(b, stores.Options{})
		return kind, s, func(recs []stores.OutboxRecord) { storetest.AddPostgres(b, s, recs...) }
	case "sqlite":
		s := storetest.OpenSQLite(b, stores.Options{})
		return kind, s, func(recs []stores.OutboxRecord) {
			tx, err := s.DB().BeginTx(context.Background(), nil)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range recs {
				if _, err := s.Outbox().Add(context.Background(), tx, r); err != nil {
					b.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	default:
		b.Fatalf("ACEMQ_BENCH_STORE=%q; want postgres or sqlite", kind)
		return "", nil, nil
	}
}

func envOrDefault(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// rawPublish is the reference: amqp091-go on a connection of its own,
// publishing n messages mandatory and persistent with at most window
// awaiting their confirm, timed until the last confirm.
func rawPublish(b *testing.B, url, ns, queue string, body []byte, n, window int) float64 {
	b.Helper()
	c, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": ns + "-raw"}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window+1))
	returns := ch.NotifyReturn(make(chan amqp.Return, window+1))
	slots := make(chan struct{}, window)
	done := make(chan int)
	go func() {
		acked, returned := 0, 0
		for seen := 0; seen < n; {
			select {
			case c := <-confirms:
				if c.Ack {
					acked++
				}
				seen++
				<-slots
			case <-returns:
				returned++
			}
		}
		done <- acked - returned
	}()
	start := time.Now()
	for i := range n {
		slots <- struct{}{}
		if err := ch.Publish("", queue, true, false, amqp.Publishing{
			MessageId: strconv.Itoa(i), ContentType: "application/octet-stream", DeliveryMode: amqp.Persistent, Body: body,
		}); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case acked := <-done:
		if acked != n {
			b.Fatalf("raw publishing: %d of %d confirmed", acked, n)
		}
	case <-time.After(60 * time.Second):
		b.Fatal("raw publishing did not finish within 60s")
	}
	return float64(n) / time.Since(start).Seconds()
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// instantPublisher confirms every publish at once.
type instantPublisher struct{}

func (instantPublisher) PublishFunc(_ context.Context, _ broker.Message, done func(error)) error {
	done(nil)
	return nil
}

// flakyMarks loses the lease on the first record of its first mark and
// fails its second mark outright.
type flakyMarks struct {
	relayStore
	mu    sync.Mutex
	calls int
}

func (f *flakyMarks) MarkPublished(ctx context.Context, ids []int64, owner string) error {
	f.mu.Lock()
	f.calls++
	call := f.calls
	f.mu.Unlock()
	switch call {
	case 1:
		if err := f.relayStore.MarkPublished(ctx, ids[1:], owner); err != nil {
			return err
		}
		return &stores.LeaseLostError{Owner: owner, IDs: ids[:1]}
	case 2:
		return errors.New("connection reset by peer")
	}
	return f.relayStore.MarkPublished(ctx, ids, owner)
}

func TestRelayLostLeaseAndFailedMarkAreLoggedAndRelayingGoesOn(t *testing.T) {
	clock := testenv.NewClock()
	st, err := memory.Open(stores.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	tx := st.Begin()
	const n = 500
	for _, r := range records(n, "q") {
		if _, err := st.Outbox().Add(t.Context(), tx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	ws := watch(st)
	r, err := New(&flakyMarks{relayStore: ws}, instantPublisher{}, Options{Batch: 50, Poll: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, r)
	// All but the record whose lease was lost get marked (the failed mark
	// is retried); that one waits for its lease, then is published again.
	waitMarked(t, ws.marked, n-1)
	if s := r.Stats(); s.LeaseLost != 1 {
		t.Fatalf("Stats() = %+v, want the lost lease counted", s)
	}
	clock.Advance(15*time.Second + time.Millisecond)
	waitMarked(t, ws.marked, 1)
	stop()
	if s := r.Stats(); s.Published != n || s.LeaseLost != 1 || s.Left != 0 {
		t.Errorf("Stats() = %+v, want %d published, 1 lease lost, none left", s, n)
	}
	if pending, _ := st.ListPending(t.Context(), 0); len(pending) != 0 {
		t.Errorf("%d records pending, want 0", len(pending))
	}
}

// stalledPublisher takes no publish until its context ends, as a publisher
// blocked by a broker's resource alarm, and reports each context's
// deadline.
type stalledPublisher struct{ deadlines chan time.Time }

func (p *stalledPublisher) PublishFunc(ctx context.Context, _ broker.Message, _ func(error)) error {
	d, _ := ctx.Deadline()
	p.deadlines <- d
	<-ctx.Done()
	return ctx.Err()
}

// A batch stops publishing before its lease ends: a record still waiting
// for the broker then is left to its lease. Before, publishing ran on to
// the drain's end, and once the broker took publishes again a relay
// published records another claim of its own had taken meanwhile, each
// several times.
func TestRelayPublishesABatchWithinItsLease(t *testing.T) {
	st := storetest.OpenSQLite(t, stores.Options{})
	addSQLite(t, st, records(3, "q")...)
	ws := watch(st)
	pub := &stalledPublisher{deadlines: make(chan time.Time, 100)}
	const lease = 800 * time.Millisecond
	r, err := New(ws, pub, Options{Poll: 5 * time.Millisecond, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	runRelay(t, r)
	select {
	case d := <-pub.deadlines:
		if d.IsZero() || d.After(start.Add(lease)) {
			t.Fatalf("a publish waited with deadline %v, want one before the lease ends at %v", d, start.Add(lease))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the relay published nothing within 10s")
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if s := r.Stats(); s.Left < 3 {
			return testenv.Errorf("relay stats %+v, want the 3 records left to their lease", s)
		}
		return nil
	})
}

// A row written by another program that AMQP cannot carry (an exchange
// name over 255 bytes; Add refuses it) or that RabbitMQ refuses (an
// expiration that is not a whole number of milliseconds: it closes the
// channel, 406) fails alone, with the reason, and the relay's connection
// and channel stay up. Before, each shut the connection or the channel at
// every lease, failing every record in flight, for ever.
func TestRelayARecordTheBrokerCannotTakeFailsAlone(t *testing.T) {
	for _, tc := range []struct {
		name, exchange, properties, reason string
	}{
		{"exchange name over 255 bytes", strings.Repeat("x", 300), `{"message_id": "bad-1"}`, "255"},
		{"expiration not in milliseconds", "", `{"message_id": "bad-1", "expiration": "soon"}`, "milliseconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRelayEnv(t)
			q := e.queue("out")
			dels := e.consume(q)
			st := storetest.OpenSQLite(t, stores.Options{})
			recs := records(20, q)
			addSQLite(t, st, recs[:10]...)
			if _, err := st.DB().ExecContext(t.Context(), `INSERT INTO acemq_outbox (exchange, routing_key, body, properties) VALUES (?, ?, ?, ?)`,
				tc.exchange, q, []byte(`{}`), tc.properties); err != nil {
				t.Fatal(err)
			}
			addSQLite(t, st, recs[10:]...)
			ws := watch(st)
			pub := e.publisher("relay")
			r, err := New(ws, pub, Options{Poll: 5 * time.Millisecond, Exchanges: e.topo, Log: e.log})
			if err != nil {
				t.Fatal(err)
			}
			runRelay(t, r)
			for _, d := range receive(t, dels, 20) {
				if d.MessageId == "bad-1" {
					t.Error("the bad row was published")
				}
			}
			waitMarked(t, ws.marked, 20)
			<-ws.failed
			if s := pub.Stats(); s.Channels != 1 || s.Indeterminate != 0 {
				t.Errorf("publisher stats %+v: want one channel and no indeterminate publish", s)
			}
			pending, err := st.ListPending(t.Context(), 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(pending) != 1 || !strings.Contains(pending[0].LastError, tc.reason) {
				t.Fatalf("pending = %+v, want the bad row, failed with a reason naming %q", pending, tc.reason)
			}
		})
	}
}
