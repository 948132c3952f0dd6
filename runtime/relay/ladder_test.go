package relay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/scheduler"
	"github.com/acemq/acemq-flow/stores"
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
