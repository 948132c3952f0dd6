package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/stores/sqlite"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestRunWithRelayPublishesTheOutboxBytesUnchanged writes an outbox record
// in a committed transaction and one in a rolled-back one; `run --relay`
// publishes the first, byte for byte, and never the second.
func TestRunWithRelayPublishesTheOutboxBytesUnchanged(t *testing.T) {
	url := testenv.VHost(t)
	ch := dial(t, url)
	if _, err := ch.QueueDeclare("orders.placed", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "acemq.db")
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	body := []byte("\"already encoded\"\x00\xff")
	for _, commit := range []bool{true, false} {
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Outbox().Add(ctx, tx, stores.OutboxRecord{Exchange: "", RoutingKey: "orders.placed", Body: body,
			ContentType: "application/octet-stream", Properties: stores.Properties{MessageID: map[bool]string{true: "kept", false: "rolled-back"}[commit]}}); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	startRuntime(t, url, "--relay", "--store", "sqlite:"+path, writeFlow(t, threeSteps))
	m := getOne(t, ch, "orders.placed", 30*time.Second)
	if m.MessageId != "kept" || string(m.Body) != string(body) || m.ContentType != "application/octet-stream" {
		t.Errorf("relayed %q %q %q, want the committed record's bytes unchanged", m.MessageId, m.Body, m.ContentType)
	}
	// Once the relay has marked everything it had, the queue holds nothing
	// more: the rolled-back record was never there to send.
	st, err = sqlite.Open(ctx, path, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	testenv.Eventually(t, 30*time.Second, func() error {
		pending, err := st.ListPending(ctx, 10)
		if err != nil {
			return err
		}
		if len(pending) > 0 {
			return testenv.Errorf("%d outbox records not yet marked published", len(pending))
		}
		return nil
	})
	q, err := ch.QueueDeclarePassive("orders.placed", true, false, false, false, nil)
	if err != nil || q.Messages != 0 {
		t.Errorf("orders.placed holds %d more messages (err %v); the rolled-back record must never be sent", q.Messages, err)
	}
}

// TestKill9RelayMidBatchLosesNothing kills `acemq-flow relay` on PostgreSQL
// with SIGKILL while it is publishing, then starts another: every record
// arrives at least once and none stays pending. The killed relay's held
// batches are released with its connection, so the second relay takes them
// at once, well within the minute-long lease.
func TestKill9RelayMidBatchLosesNothing(t *testing.T) {
	url := testenv.VHost(t)
	ch := dial(t, url)
	const queue, n = "orders.placed", 20000
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	recs := make([]stores.OutboxRecord, n)
	for i := range recs {
		recs[i] = stores.OutboxRecord{RoutingKey: queue, Body: fmt.Appendf(nil, `{"order":%d}`, i),
			ContentType: "application/json", Properties: stores.Properties{MessageID: fmt.Sprint("o-", i)}}
	}
	storeURL, st := postgresOutbox(t, recs...)
	ctx := context.Background()
	relay := func() *runtimeProc {
		return launchCommand(t, "relay", "--store", storeURL, "--amqp", url, "--lease", "1m", "--poll", "10ms", "--log-level", "debug")
	}
	first := relay()
	testenv.Eventually(t, 60*time.Second, func() error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		if err != nil || q.Messages == 0 {
			return testenv.Errorf("the first relay has published nothing yet (%v)", err)
		}
		return nil
	})
	first.stop(t, syscall.SIGKILL)
	pending, err := st.ListPending(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) == 0 {
		t.Fatalf("the first relay finished all %d records before it was killed; the test needs more records", n)
	}
	t.Logf("killed with %d of %d records pending", len(pending), n)

	start := time.Now()
	second := relay()
	testenv.Eventually(t, 30*time.Second, func() error {
		pending, err := st.ListPending(ctx, 0)
		if err != nil || len(pending) != 0 {
			return testenv.Errorf("%d records pending (%v)", len(pending), err)
		}
		return nil
	})
	if d := time.Since(start); d >= time.Minute {
		t.Errorf("the second relay took %s: the killed relay's batches waited for their lease", d)
	}
	if err := second.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("relay after SIGTERM: %v\n%s", err, second.output())
	}

	seen := map[string]bool{}
	dels, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(60 * time.Second)
	for len(seen) < n {
		select {
		case d := <-dels:
			seen[d.MessageId] = true
		case <-timeout:
			t.Fatalf("%d of %d records arrived within 60s", len(seen), n)
		}
	}
}

// TestRunWithRelayOnPostgres runs `run --relay` on a PostgreSQL store (the
// relay's held batches take their connections from the store's pool for
// them): a committed record arrives and is marked published.
func TestRunWithRelayOnPostgres(t *testing.T) {
	url := testenv.VHost(t)
	ch := dial(t, url)
	if _, err := ch.QueueDeclare("orders.placed", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"order":"o-1"}`)
	storeURL, st := postgresOutbox(t, stores.OutboxRecord{RoutingKey: "orders.placed", Body: body,
		ContentType: "application/json", Properties: stores.Properties{MessageID: "o-1"}})
	ctx := context.Background()
	startRuntime(t, url, "--relay", "--store", storeURL, writeFlow(t, threeSteps))
	m := getOne(t, ch, "orders.placed", 30*time.Second)
	if m.MessageId != "o-1" || string(m.Body) != string(body) {
		t.Errorf("relayed %q %q, want the record's id and bytes", m.MessageId, m.Body)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		pending, err := st.ListPending(ctx, 0)
		if err != nil || len(pending) != 0 {
			return testenv.Errorf("%d records pending (%v)", len(pending), err)
		}
		return nil
	})
}

// postgresOutbox opens a migrated PostgreSQL store in a schema of the test's
// own, writes recs in one committed transaction, and returns the store's URL
// (for the binary) and the store (for the test's checks).
func postgresOutbox(t *testing.T, recs ...stores.OutboxRecord) (string, *postgres.Store) {
	t.Helper()
	st, storeURL := storetest.OpenPostgresSchema(t, stores.Options{})
	storetest.AddPostgres(t, st, recs...)
	return storeURL, st
}
