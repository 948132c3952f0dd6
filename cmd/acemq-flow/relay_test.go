package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/test/queuetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

func TestRelayCommandPublishesAndStopsOnSignal(t *testing.T) {
	e := queuetest.New(t)
	amqpURL := e.URL
	store, st := migratedSQLite(t)
	q := e.Queue("out")
	body := []byte{0xde, 0xad, 0xbe, 0xef}
	addRecord(t, st, stores.OutboxRecord{RoutingKey: q, Body: body, Properties: stores.Properties{MessageID: "o-1"}})
	dels := e.Consume(q)

	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"relay", "--store", store, "--amqp", amqpURL, "--poll", "10ms"}, strings.NewReader(""), &out, &errb)
	}()
	select {
	case d := <-dels:
		if !bytes.Equal(d.Body, body) || d.MessageId != "o-1" {
			t.Errorf("relay published %x (%s), want %x (o-1)", d.Body, d.MessageId, body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay published nothing within 30s")
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		recs, err := st.ListPending(context.Background(), 0)
		if err != nil || len(recs) != 0 {
			return testenv.Errorf("%d records pending (%v), want 0", len(recs), err)
		}
		return nil
	})
	cancel() // as SIGTERM does
	if c := <-code; c != 0 {
		t.Errorf("relay after its context ended: exit %d, want 0\nstderr: %s", c, errb.String())
	}
	if !strings.Contains(errb.String(), "relay stopped") || out.Len() != 0 {
		t.Errorf("relay logs on stderr and prints nothing on stdout; stdout %q, stderr:\n%s", out.String(), errb.String())
	}
}

func TestRelayCommandErrors(t *testing.T) {
	store, _ := migratedSQLite(t)
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"a memory store holds nothing to relay", []string{"relay", "--store", "memory:"}, 2},
		{"a zero batch", []string{"relay", "--store", store, "--batch", "0"}, 2},
		{"an unknown store scheme", []string{"relay", "--store", "redis://:pw@localhost"}, 2},
		{"an unreachable database, its password never shown", []string{"relay", "--store", "postgres://acemq:s3cret@127.0.0.1:1/flows?connect_timeout=1"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := cli(t, tc.args...)
			if code != tc.code {
				t.Errorf("acemq-flow %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.code, out, errOut)
			}
			if strings.Contains(out+errOut, "s3cret") || strings.Contains(out+errOut, ":pw@") {
				t.Errorf("acemq-flow %s printed a password:\n%s%s", strings.Join(tc.args, " "), out, errOut)
			}
		})
	}
	t.Run("an unreachable broker, its password never shown", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		code := run(ctx, []string{"relay", "--store", store, "--amqp", "amqp://guest:s3cret@127.0.0.1:1/"}, strings.NewReader(""), &out, &errb)
		if code != 1 || strings.Contains(errb.String(), "s3cret") {
			t.Errorf("relay to an unreachable broker: exit %d (want 1), stderr:\n%s", code, errb.String())
		}
	})
}

// TestRunRelayDeliversARecordDueLaterThroughTheLadder: `run --relay`, on a
// broker of its own, relays an outbox record due in 3 s into the delay
// ladder and delivers it when due (the runtime consumes the ladder's due
// queue), never early, while a record with no deliver_at arrives at once
// with no ladder header. The real 1 s ladder.
func TestRunRelayDeliversARecordDueLaterThroughTheLadder(t *testing.T) {
	amqpURL := testenv.VHost(t)
	ch := testenv.ConfirmedChannel(t, amqpURL)
	if _, err := ch.QueueDeclare("reminders", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume("reminders", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	store, st := migratedSQLite(t)
	due := time.Now().Add(3 * time.Second)
	addRecord(t, st, stores.OutboxRecord{RoutingKey: "reminders", Body: []byte(`{"invoice":7}`), DeliverAt: due, Properties: stores.Properties{MessageID: "later"}})
	addRecord(t, st, stores.OutboxRecord{RoutingKey: "reminders", Body: []byte(`{"invoice":8}`), Properties: stores.Properties{MessageID: "now"}})

	// A flow with nothing of its own: the runtime runs only the relay and
	// the ladder's due consumer.
	flow := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(flow, []byte("version: acemq.flow/v1\nname: empty\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out bytes.Buffer
	var errb lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"run", "--store", store, "--amqp", amqpURL, "--admin", "", "--blobs", "file:" + t.TempDir(), "--relay", flow}, strings.NewReader(""), &out, &errb)
	}()
	for _, want := range []string{"now", "later"} {
		select {
		case d := <-dels:
			arrived := time.Now()
			_, delayed := d.Headers["x-acemq-due-at"]
			switch {
			case d.MessageId != want:
				t.Fatalf("message %q arrived, want %q (the record with no deliver_at first)", d.MessageId, want)
			case want == "now" && delayed:
				t.Errorf("the record with no deliver_at arrived with x-acemq-due-at %v; want it published straight to its queue", d.Headers["x-acemq-due-at"])
			case want == "later" && (!delayed || arrived.Before(due)):
				t.Errorf("the record due at %s arrived at %s with x-acemq-due-at %v; want it through the ladder, never early",
					due.Format(time.RFC3339Nano), arrived.Format(time.RFC3339Nano), d.Headers["x-acemq-due-at"])
			}
		case c := <-code:
			t.Fatalf("run exited %d before the records arrived\nstderr: %s", c, errb.String())
		case <-time.After(60 * time.Second):
			t.Fatalf("message %q did not arrive within 60s\nstderr: %s", want, errb.String())
		}
	}
	cancel()
	if c := <-code; c != 0 {
		t.Errorf("run --relay after its context ended: exit %d, want 0\nstderr: %s", c, errb.String())
	}
}
