package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/sqlite"
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
