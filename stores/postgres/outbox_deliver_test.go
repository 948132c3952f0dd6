package postgres_test

import (
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
)

// TestOutboxDeliverAtWrittenWithPlainSQL inserts a row as stores/README.md
// tells a service in another language to, due in three days by the
// database's clock, and reads it back with that deliver_at.
func TestOutboxDeliverAtWrittenWithPlainSQL(t *testing.T) {
	s := storetest.OpenPostgres(t, stores.Options{})
	before := time.Now()
	_, err := s.Pool().Exec(t.Context(), `INSERT INTO acemq_outbox (exchange, routing_key, body, content_type, properties, deliver_at)
VALUES ('billing', 'invoice.remind', $1::bytea, 'application/json',
        '{"message_id": "remind-1001"}', now() + interval '3 days')`, []byte(`{"invoice":1001}`))
	if err != nil {
		t.Fatalf("insert a row with deliver_at in plain SQL: %v", err)
	}
	recs, err := s.ClaimBatch(t.Context(), "relay", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Properties.MessageID != "remind-1001" {
		t.Fatalf("ClaimBatch = %+v, want the row remind-1001", recs)
	}
	// The database's clock, not ours: a minute either way.
	if want := before.Add(72 * time.Hour); recs[0].DeliverAt.Before(want.Add(-time.Minute)) || recs[0].DeliverAt.After(want.Add(time.Minute)) {
		t.Errorf("deliver_at = %s, want about %s", recs[0].DeliverAt, want)
	}
}
