package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/relay"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
	"github.com/acemq/acemq-flow/test/queuetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// migrated returns the URL of a new, migrated store of the kind named.
func migrated(t *testing.T, kind string) string {
	t.Helper()
	u := "sqlite:" + filepath.Join(t.TempDir(), "shop.db")
	if kind == "postgres" {
		u = testenv.PostgresSchema(t)
	}
	set, err := storeurl.Open(t.Context(), u, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if err := set.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return u
}

// place runs the example and returns the ids it committed.
func place(t *testing.T, storeURL string, args ...string) []string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(t.Context(), args, storeURL, &out, &errb); code != 0 {
		t.Fatalf("outbox %s: exit %d\n%s", strings.Join(args, " "), code, errb.String())
	}
	return strings.Fields(out.String())
}

func TestOutboxExampleCommitsOrderAndRecordTogether(t *testing.T) {
	u := migrated(t, "sqlite")
	ids := place(t, u, "--count", "10", "--rollback-every", "3")
	if len(ids) != 7 {
		t.Fatalf("10 orders with every 3rd rolled back: %d committed, want 7", len(ids))
	}
	set, err := storeurl.Open(t.Context(), u, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	recs, err := set.ListPending(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var announced []string
	for _, r := range recs {
		var o Order
		if err := json.Unmarshal(r.Body, &o); err != nil || o.ID != r.Properties.MessageID {
			t.Errorf("record %d: body %q (%v) does not carry its message id %q", r.ID, r.Body, err, r.Properties.MessageID)
		}
		announced = append(announced, o.ID)
	}
	if !slices.Equal(announced, ids) {
		t.Errorf("outbox holds announcements of %v, want exactly the committed orders %v", announced, ids)
	}
}

func TestOutboxExampleWithoutTables(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"--count", "1"}, "sqlite:"+filepath.Join(t.TempDir(), "empty.db"), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "acemq-flow migrate") {
		t.Errorf("outbox on a store without tables: exit %d, stderr %q; want 1 naming `acemq-flow migrate`", code, errb.String())
	}
}

// TestOutboxExampleThroughTheRelay places orders, rolling some back, and
// runs the relay: exactly the committed orders arrive, byte for byte as
// they were encoded, each once.
func TestOutboxExampleThroughTheRelay(t *testing.T) {
	testenv.AMQP(t)
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			e := queuetest.New(t)
			amqpURL := e.URL
			u := migrated(t, kind)
			q := e.Queue("orders")
			dels := e.Consume(q)
			ids := place(t, u, "--count", "12", "--rollback-every", "4", "--routing-key", q)

			set, err := storeurl.Open(t.Context(), u, stores.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- relay.Run(ctx, amqpURL, set, relay.Options{Poll: 10 * time.Millisecond}) }()
			got := map[string][]byte{}
			timeout := time.After(30 * time.Second)
			for len(got) < len(ids) {
				select {
				case d := <-dels:
					if _, dup := got[d.MessageId]; dup {
						t.Errorf("order %s arrived twice", d.MessageId)
					}
					got[d.MessageId] = d.Body
				case <-timeout:
					t.Fatalf("%d of %d committed orders arrived within 30s", len(got), len(ids))
				}
			}
			testenv.Eventually(t, 30*time.Second, func() error {
				recs, err := set.ListPending(context.Background(), 0)
				if err != nil || len(recs) != 0 {
					return testenv.Errorf("%d records pending (%v), want 0", len(recs), err)
				}
				return nil
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			for i, id := range ids {
				want, _ := json.Marshal(Order{ID: id, Customer: "c-1", TotalCents: int64(1000 + committedIndex(i, 4))})
				if !bytes.Equal(got[id], want) {
					t.Errorf("order %s arrived as %q, want %q", id, got[id], want)
				}
			}
			select {
			case d := <-dels:
				t.Errorf("message %s arrived beyond the committed orders", d.MessageId)
			default:
			}
		})
	}
}

// committedIndex is the 1-based order number of the i-th committed order
// when every k-th was rolled back.
func committedIndex(i, k int) int {
	n := 0
	for seen := -1; seen < i; {
		n++
		if n%k != 0 {
			seen++
		}
	}
	return n
}

// TestOutboxExampleRemindsThroughTheLadder places orders with --remind-in
// 3s and runs a runtime (as `acemq-flow run`, which delivers what is due
// in the delay ladder) beside the relay: the announcements arrive at once,
// and each reminder arrives through the ladder, never before its
// deliver_at, once. The real 1 s ladder, on a vhost of the test's own.
func TestOutboxExampleRemindsThroughTheLadder(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			amqpURL := testenv.VHost(t)
			ch := testenv.ConfirmedChannel(t, amqpURL)
			for _, q := range []string{"orders.placed", "orders.remind"} {
				if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
					t.Fatal(err)
				}
			}
			placed, reminders := consume(t, amqpURL, "orders.placed"), consume(t, amqpURL, "orders.remind")
			u := migrated(t, kind)
			ids := place(t, u, "--count", "3", "--remind-in", "3s")

			set, err := storeurl.Open(t.Context(), u, stores.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			recs, err := set.ListPending(t.Context(), 0)
			if err != nil {
				t.Fatal(err)
			}
			due := map[string]time.Time{}
			for _, r := range recs {
				if !r.DeliverAt.IsZero() {
					due[r.Properties.MessageID] = r.DeliverAt
				}
			}
			if len(recs) != 6 || len(due) != 3 {
				t.Fatalf("3 orders with reminders wrote %d records, %d with a deliver_at; want 6 and 3", len(recs), len(due))
			}

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rt, err := runtime.New(&plan.Plan{}, runtime.Options{AMQPURL: amqpURL, Delays: true})
			if err != nil {
				t.Fatal(err)
			}
			ran := make(chan error, 1)
			go func() { ran <- rt.Run(ctx) }()
			relayed := make(chan error, 1)
			go func() { relayed <- relay.Run(ctx, amqpURL, set, relay.Options{Poll: 10 * time.Millisecond}) }()

			announced := receiveIDs(t, placed, len(ids))
			if slices.Sort(announced); !slices.Equal(announced, slices.Sorted(slices.Values(ids))) {
				t.Errorf("announcements %v, want the orders %v", announced, ids)
			}
			got := map[string]bool{}
			timeout := time.After(60 * time.Second)
			for len(got) < len(ids) {
				select {
				case d := <-reminders:
					arrived := time.Now()
					want, ok := due[d.MessageId]
					switch {
					case !ok || got[d.MessageId]:
						t.Errorf("reminder %q arrived, want each of %v once", d.MessageId, slices.Sorted(maps.Keys(due)))
					case arrived.Before(want):
						t.Errorf("reminder %s due at %s arrived at %s: early", d.MessageId, want.Format(time.RFC3339Nano), arrived.Format(time.RFC3339Nano))
					}
					got[d.MessageId] = true
				case <-timeout:
					t.Fatalf("%d of %d reminders arrived within 60s", len(got), len(ids))
				}
			}
			cancel()
			if err := <-relayed; err != nil {
				t.Errorf("relay.Run: %v", err)
			}
			if err := <-ran; err != nil {
				t.Errorf("runtime.Run: %v", err)
			}
		})
	}
}

// consume delivers queue's messages (acknowledged) until the test ends.
func consume(t *testing.T, url, queue string) <-chan amqp.Delivery {
	t.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dels
}

// receiveIDs takes n deliveries' message ids, failing after 30s.
func receiveIDs(t *testing.T, dels <-chan amqp.Delivery, n int) []string {
	t.Helper()
	var out []string
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case d := <-dels:
			out = append(out, d.MessageId)
		case <-timeout:
			t.Fatalf("%d of %d messages arrived within 30s", len(out), n)
		}
	}
	return out
}
