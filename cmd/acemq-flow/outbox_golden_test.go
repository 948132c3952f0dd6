package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestOutboxListGoldens lists an SQLite outbox holding records in every
// state: untouched, failed once and pending again, stuck after its
// attempts, one whose properties another program wrote wrong, one
// published (listed by neither), and one to be delivered later (its
// DELIVER AT column shown only in a listing that holds it). Each record is made older than now by a
// fixed age, with room on both sides, so that the AGE column is the same
// whenever the test runs.
func TestOutboxListGoldens(t *testing.T) {
	clock := testenv.NewClock()
	st := storetest.OpenSQLite(t, stores.Options{OutboxMaxAttempts: 2, OutboxRetryDelay: time.Second, Now: clock.Now})
	store := "sqlite:" + st.Path()
	ctx := t.Context()

	recs := []struct {
		rec stores.OutboxRecord
		age time.Duration
	}{
		{stores.OutboxRecord{Exchange: "orders", RoutingKey: "order.placed", ContentType: "application/json",
			Body: []byte(`{"order_id":"ord-1","total":84.5}`), Properties: stores.Properties{MessageID: "o-1"}}, 5*24*time.Hour + 12*time.Hour},
		{stores.OutboxRecord{RoutingKey: "audit", Body: []byte("line one\nline two\x1b[31m red, and a tail past the preview")}, 3*time.Hour + 30*time.Minute},
		{stores.OutboxRecord{Exchange: "billing", RoutingKey: "invoice.due", Body: []byte(`{"invoice":7}`)}, 2*time.Hour + 30*time.Minute},
		{stores.OutboxRecord{Exchange: "orders", RoutingKey: "order.nowhere", Body: []byte(`{}`)}, 20*time.Minute + 30*time.Second},
		{stores.OutboxRecord{Exchange: "orders", RoutingKey: "order.sent", Body: []byte(`{}`)}, 12*time.Minute + 30*time.Second},
	}
	for _, r := range recs {
		addRecord(t, st, r.rec)
	}
	// A row another program wrote, with a priority that is not a number.
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO acemq_outbox (exchange, routing_key, body, properties)
VALUES ('orders', 'order.legacy', '{"legacy":true}', '{"priority":"high"}')`); err != nil {
		t.Fatal(err)
	}
	recs = append(recs, struct {
		rec stores.OutboxRecord
		age time.Duration
	}{age: 45 * 24 * time.Hour})
	// A reminder to be delivered on the first of March, 2031, at 09:30:00.25
	// UTC (shown to the second, in UTC, whatever zone it was written in).
	berlin := time.FixedZone("CET", 3600)
	addRecord(t, st, stores.OutboxRecord{Exchange: "billing", RoutingKey: "invoice.remind", Body: []byte(`{"invoice":8}`),
		DeliverAt: time.Date(2031, 3, 1, 10, 30, 0, 250e6, berlin)})
	recs = append(recs, struct {
		rec stores.OutboxRecord
		age time.Duration
	}{age: 2*time.Minute + 30*time.Second})
	for i, r := range recs {
		if _, err := st.DB().ExecContext(ctx, `UPDATE acemq_outbox SET created_at = created_at - ? WHERE id = ?`, r.age.Milliseconds(), i+1); err != nil {
			t.Fatal(err)
		}
	}

	// The relay's side: id 3 fails once and is pending again; id 4 fails
	// twice and is stuck; id 5 is published; id 6 is left alone, listed
	// with why its properties cannot be read.
	claim := func() {
		t.Helper()
		if _, err := st.ClaimBatch(ctx, "relay-1", 10, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	fail := func(id int64, reason string) {
		t.Helper()
		if _, err := st.MarkFailed(ctx, id, "relay-1", reason); err != nil {
			t.Fatal(err)
		}
	}
	claim()
	fail(3, `exchange "billing" does not exist`)
	fail(4, "published, but it reached no queue: nothing is bound to exchange \"orders\" with routing key \"order.nowhere\"")
	if err := st.MarkPublished(ctx, []int64{5}, "relay-1"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	claim()
	fail(4, "published, but it reached no queue: nothing is bound to exchange \"orders\" with routing key \"order.nowhere\"")

	cases := []struct {
		name string
		args []string
	}{
		{"pending", nil},
		{"pending-limit", []string{"--limit", "2"}},
		{"stuck", []string{"--stuck"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"outbox", "list", "--store", store}, tc.args...)
			out, errOut, code := cli(t, args...)
			if code != 0 {
				t.Fatalf("acemq-flow %s: exit %d\nstderr: %s", strings.Join(args, " "), code, errOut)
			}
			golden(t, filepath.Join("testdata/outbox", tc.name+".golden"), []byte(out))
		})
	}
}
