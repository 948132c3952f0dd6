package sqlite_test

import (
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
)

// TestOutboxDeliverAtWrittenWithPlainSQL inserts a row as stores/README.md
// tells a service in another language to, deliver_at in unix
// milliseconds, and reads it back with that deliver_at.
func TestOutboxDeliverAtWrittenWithPlainSQL(t *testing.T) {
	s := storetest.OpenSQLite(t, stores.Options{})
	due := time.Date(2031, 3, 1, 9, 30, 0, 250e6, time.UTC)
	_, err := s.DB().ExecContext(t.Context(), `INSERT INTO acemq_outbox (exchange, routing_key, body, content_type, properties, deliver_at)
VALUES ('billing', 'invoice.remind', ?1, 'application/json', '{"message_id": "remind-1001"}', ?2)`, []byte(`{"invoice":1001}`), due.UnixMilli())
	if err != nil {
		t.Fatalf("insert a row with deliver_at in plain SQL: %v", err)
	}
	recs, err := s.ClaimBatch(t.Context(), "relay", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || !recs[0].DeliverAt.Equal(due) || recs[0].Properties.MessageID != "remind-1001" {
		t.Fatalf("ClaimBatch = %+v, want the row remind-1001 with deliver_at %s", recs, due)
	}
}
