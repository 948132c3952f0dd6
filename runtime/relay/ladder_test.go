package relay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/scheduler"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// ladderStore is an outbox for the deliver_at tests: its relay side and a
// way to write records through its own write side.
type ladderStore struct {
	stores.OutboxRelay
	add func(recs ...stores.OutboxRecord)
}

func openLadderStore(t *testing.T, backend string) ladderStore {
	t.Helper()
	switch backend {
	case "sqlite":
		s := storetest.OpenSQLite(t, stores.Options{})
		return ladderStore{s, func(recs ...stores.OutboxRecord) { addSQLite(t, s, recs...) }}
	case "postgres":
		s := storetest.OpenPostgres(t, stores.Options{})
		return ladderStore{s, func(recs ...stores.OutboxRecord) { storetest.AddPostgres(t, s, recs...) }}
	}
	t.Fatalf("no store %q", backend)
	return ladderStore{}
}

// ladderBroker is a vhost of the test's own with exchange billing routing
// key remind to queue reminders, whose deliveries it returns.
func ladderBroker(t *testing.T) (url string, topo *broker.Topology, reminders <-chan amqp.Delivery) {
	t.Helper()
	url = testenv.VHost(t)
	conn, err := broker.Open(t.Context(), url, broker.ConnOptions{Name: "deliver_at test topology"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	topo = broker.NewTopology(conn, nil)
	t.Cleanup(func() { _ = topo.Close() })
	err = topo.Declare(t.Context(), []broker.Exchange{{Name: "billing", Kind: "direct", Durable: true}},
		[]broker.Queue{{Name: "reminders", Durable: true, Args: map[string]any{"x-queue-type": "quorum"}}},
		[]broker.Binding{{Exchange: "billing", Queue: "reminders", RoutingKey: "remind"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	reminders, err = ch.Consume("reminders", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return url, topo, reminders
}

// runRelayOn runs Run, as `acemq-flow relay` does, until the test ends.
func runRelayOn(t *testing.T, url string, st stores.OutboxRelay, log *slog.Logger) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, url, st, Options{Poll: 5 * time.Millisecond, Log: log}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay.Run: %v", err)
		}
	})
}

// runDue runs the runtime's `.due` consumer on url until the test ends.
func runDue(t *testing.T, url string) {
	t.Helper()
	var conns []*broker.Conn
	for _, name := range []string{"consume", "publish"} {
		c, err := broker.Open(t.Context(), url, broker.ConnOptions{Name: "deliver_at test due " + name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns = append(conns, c)
	}
	due, err := scheduler.NewDue(conns[0], conns[1], scheduler.DueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- due.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Due.Run: %v", err)
		}
	})
}

func reminder(id string, deliverAt time.Time) stores.OutboxRecord {
	return stores.OutboxRecord{Exchange: "billing", RoutingKey: "remind", Body: []byte(`{"invoice":"` + id + `"}`),
		ContentType: "application/json", DeliverAt: deliverAt,
		Properties: stores.Properties{MessageID: id, Headers: map[string]any{"x-tenant": "acme"}}}
}

// TestRelayDeliverAtGoesThroughTheLadder: on a broker where nothing of the
// delay ladder exists, a record due in 3 s is published into the ladder (the
// relay declares it, and marks the record once the ladder has it) and
// arrives at its exchange through the `.due` consumer, never before its
// deliver_at, with its body, id and headers and the ladder's headers naming
// where it went; records due a minute ago, or with no deliver_at, go
// straight to the exchange, with no ladder header. The real 1 s ladder.
func TestRelayDeliverAtGoesThroughTheLadder(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) { deliverAtThroughLadder(t, backend) })
	}
}

func deliverAtThroughLadder(t *testing.T, backend string) {
	url, _, reminders := ladderBroker(t)
	st := openLadderStore(t, backend)
	log := &testenv.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay log:\n%s", log.String())
		}
	})
	now := time.Now()
	later := reminder("later", now.Add(3*time.Second))
	st.add(later, reminder("past", now.Add(-time.Minute)), reminder("now", time.Time{}))
	runRelayOn(t, url, st, slog.New(slog.NewTextHandler(log, nil)))

	var direct []string
	for _, d := range receive(t, reminders, 2) {
		direct = append(direct, d.MessageId)
		if _, ok := d.Headers[plan.HeaderDueAt]; ok {
			t.Errorf("record %s, due already, arrived with %s = %v; want it published straight to its exchange", d.MessageId, plan.HeaderDueAt, d.Headers[plan.HeaderDueAt])
		}
	}
	if slices.Sort(direct); !slices.Equal(direct, []string{"now", "past"}) {
		t.Fatalf("first deliveries = %v, want the records due now and a minute ago, [now past]; the one due in 3 s must wait", direct)
	}
	// The ladder has it once the record is published; only then does the
	// `.due` consumer have a queue to consume.
	testenv.Eventually(t, 30*time.Second, func() error {
		pending, err := st.ListPending(context.Background(), 0)
		if err != nil || len(pending) > 0 {
			return fmt.Errorf("pending records %d (%v), want none once the ladder has the record", len(pending), err)
		}
		return nil
	})
	runDue(t, url)

	d := receive(t, reminders, 1)[0]
	arrived := time.Now()
	if d.MessageId != "later" || string(d.Body) != string(later.Body) || d.ContentType != "application/json" || d.Headers["x-tenant"] != "acme" {
		t.Errorf("delivered %q %q %q x-tenant %v, want the record due in 3 s unchanged: later %s application/json acme", d.MessageId, d.Body, d.ContentType, d.Headers["x-tenant"], later.Body)
	}
	if arrived.Before(later.DeliverAt) {
		t.Errorf("record due at %s arrived at %s: early", later.DeliverAt.Format(time.RFC3339Nano), arrived.Format(time.RFC3339Nano))
	}
	h := decide.Table(d.Headers)
	if ex, key := decide.HeaderText(h[plan.HeaderDeliverExchange]), decide.HeaderText(h[plan.HeaderDeliverRoutingKey]); ex != "billing" || key != "remind" {
		t.Errorf("ladder headers name exchange %q key %q, want billing remind", ex, key)
	}
	dueAt, err := time.Parse(time.RFC3339Nano, decide.HeaderText(h[plan.HeaderDueAt]))
	if err != nil || dueAt.Before(later.DeliverAt.Truncate(time.Millisecond)) {
		t.Errorf("%s = %v (%v), want at or after the record's deliver_at %s", plan.HeaderDueAt, h[plan.HeaderDueAt], err, decide.FormatDueAt(later.DeliverAt))
	}
	if !strings.Contains(log.String(), "delay ladder declared") {
		t.Errorf("relay log does not say it declared the delay ladder:\n%s", log.String())
	}
}

// TestRelayDeliverAtTheLadderCannotTakeFailsWithTheReason: a record due
// beyond what the ladder holds, and, on a broker whose ladder was declared
// otherwise, a record due later, each fail with a reason naming the ladder
// (then, at the attempt limit, stuck and listed), while the record due now
// beside them is published.
func TestRelayDeliverAtTheLadderCannotTakeFailsWithTheReason(t *testing.T) {
	cases := []struct {
		name      string
		drift     bool
		deliverAt time.Duration
		reason    string
	}{
		{"due in ten years, beyond the ladder", false, 10 * 365 * 24 * time.Hour, "longer than the delay ladder holds"},
		{"due in a minute, the ladder declared otherwise", true, time.Minute, "the delay ladder this record is due through cannot be declared"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, topo, reminders := ladderBroker(t)
			if tc.drift {
				// Level 0 as a classic queue: not the ladder's quorum level.
				if err := topo.DeclareQueue(t.Context(), broker.Queue{Name: plan.LadderQueue(0), Durable: true}); err != nil {
					t.Fatal(err)
				}
			}
			st := openLadderStore(t, "sqlite")
			st.add(reminder("kept", time.Now().Add(tc.deliverAt)), reminder("now", time.Time{}))
			runRelayOn(t, url, st, nil)
			if d := receive(t, reminders, 1)[0]; d.MessageId != "now" {
				t.Fatalf("delivered %q, want the record due now", d.MessageId)
			}
			testenv.Eventually(t, 30*time.Second, func() error {
				pending, err := st.ListPending(context.Background(), 0)
				if err != nil {
					return err
				}
				if len(pending) != 1 || pending[0].Attempts == 0 {
					return fmt.Errorf("pending %d records, want the one the ladder cannot take, failed", len(pending))
				}
				t.Logf("record failed: %s", pending[0].LastError)
				if !strings.Contains(pending[0].LastError, tc.reason) {
					t.Fatalf("record failed with %q, want a reason containing %q", pending[0].LastError, tc.reason)
				}
				return nil
			})
		})
	}
}

// capturePublisher confirms every publish at once and keeps what it was
// given.
type capturePublisher struct {
	mu   sync.Mutex
	msgs map[string]broker.Message // by message id
}

func (c *capturePublisher) PublishFunc(_ context.Context, msg broker.Message, done func(error)) error {
	c.mu.Lock()
	c.msgs[msg.Publishing.MessageId] = msg
	c.mu.Unlock()
	done(nil)
	return nil
}

// countingLadder counts declarations of the ladder and checks they name
// all of it.
type countingLadder struct {
	mu        sync.Mutex
	checks    int
	declares  int
	exchanges int
}

func (l *countingLadder) CheckDrift(context.Context, []broker.Exchange, []broker.Queue) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checks++
	return nil
}

func (l *countingLadder) Declare(_ context.Context, xs []broker.Exchange, _ []broker.Queue, _ []broker.Binding) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.declares++
	l.exchanges = len(xs)
	return nil
}

// TestRelayAddressesARecordDueLaterToTheLadder, with no broker: a record
// due in 5 s is published to the exchange of the level of its highest
// digit with its delay as the routing key, its destination and due time in
// the ladder's headers, its own headers and properties kept but for the
// expiration; one due in under a second goes straight to `.due`; records due
// already go to their exchange unchanged; and the ladder is declared once,
// checked for drift first, however many records need it.
func TestRelayAddressesARecordDueLaterToTheLadder(t *testing.T) {
	st, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	// Just under 5 s: the store rounds it up to the millisecond, and the
	// relay's clock has moved on when it publishes, so the delay is 5 s
	// rounded up, or 4 s if the relay took more than a second.
	in5s := reminder("in-5s", now.Add(5*time.Second-time.Millisecond))
	in5s.Properties.Expiration = "60000"
	recs := []stores.OutboxRecord{in5s, reminder("in-under-a-second", now.Add(900*time.Millisecond)),
		reminder("past", now.Add(-time.Second)), reminder("now", time.Time{})}
	tx := st.Begin()
	for _, r := range recs {
		if _, err := st.Outbox().Add(t.Context(), tx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	pub := &capturePublisher{msgs: map[string]broker.Message{}}
	ladder := &countingLadder{}
	ws := watch(st)
	r, err := New(ws, pub, Options{Poll: time.Millisecond, Ladder: ladder})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	waitMarked(t, ws.marked, len(recs))

	m := pub.msgs["in-5s"]
	keys := []string{strings.Repeat("0.", plan.LadderLevels-3) + "1.0.1", strings.Repeat("0.", plan.LadderLevels-3) + "1.0.0"}
	if m.Exchange != plan.LadderExchange(2) || !slices.Contains(keys, m.RoutingKey) {
		t.Errorf("record due in 5 s published to %q with key %q, want %q with %q (or, a second later, %q)", m.Exchange, m.RoutingKey, plan.LadderExchange(2), keys[0], keys[1])
	}
	h := decide.Table(m.Publishing.Headers)
	if ex, key := decide.HeaderText(h[plan.HeaderDeliverExchange]), decide.HeaderText(h[plan.HeaderDeliverRoutingKey]); ex != "billing" || key != "remind" {
		t.Errorf("record due in 5 s: destination headers %q %q, want billing remind", ex, key)
	}
	if got, want := decide.HeaderText(h[plan.HeaderDueAt]), decide.FormatDueAt(in5s.DeliverAt); got < want {
		t.Errorf("record due in 5 s: %s = %s, want at or after its deliver_at %s", plan.HeaderDueAt, got, want)
	}
	if h["x-tenant"] != "acme" || m.Publishing.Expiration != "" || string(m.Publishing.Body) != string(in5s.Body) || m.Publishing.ContentType != "application/json" {
		t.Errorf("record due in 5 s: x-tenant %v, expiration %q, body %q, content type %q; want its header, body and content type kept and no expiration (it would leave a level early)",
			h["x-tenant"], m.Publishing.Expiration, m.Publishing.Body, m.Publishing.ContentType)
	}
	if m := pub.msgs["in-under-a-second"]; m.Exchange != "" || m.RoutingKey != plan.DueQueue || m.Publishing.Headers[plan.HeaderDeliverExchange] != "billing" {
		t.Errorf("record due in under a second published to %q with key %q, destination %v; want the default exchange, key %s, destination billing",
			m.Exchange, m.RoutingKey, m.Publishing.Headers[plan.HeaderDeliverExchange], plan.DueQueue)
	}
	for _, id := range []string{"past", "now"} {
		m := pub.msgs[id]
		if _, delayed := m.Publishing.Headers[plan.HeaderDueAt]; m.Exchange != "billing" || m.RoutingKey != "remind" || delayed {
			t.Errorf("record %s published to %q with key %q (headers %v), want billing remind, no ladder header", id, m.Exchange, m.RoutingKey, m.Publishing.Headers)
		}
	}
	if ladder.checks != 1 || ladder.declares != 1 || ladder.exchanges != plan.LadderLevels+1 {
		t.Errorf("ladder checked %d and declared %d times with %d exchanges, want once each, with the %d levels and %s", ladder.checks, ladder.declares, ladder.exchanges, plan.LadderLevels, plan.DeadLetterExchange)
	}
}
