package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// appPool opens a pool the way an application writing outbox records would:
// its own, on the same database and search_path.
func appPool(t *testing.T, connURL string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(t.Context(), connURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestConformance(t *testing.T) {
	storetest.RunAll(t, func(t *testing.T, opts stores.Options) storetest.Backend {
		connURL := testenv.PostgresSchema(t)
		s := storetest.OpenPostgresURL(t, connURL, opts)
		if err := s.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		pool := appPool(t, connURL)
		return storetest.Backend{
			Set:  s,
			Peer: func(t *testing.T) stores.Set { return storetest.OpenPostgresURL(t, connURL, opts) },
			WriteOutbox: func(ctx context.Context, commit bool, recs ...stores.OutboxRecord) ([]int64, error) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return nil, err
				}
				var ids []int64
				for _, r := range recs {
					id, err := s.Outbox().Add(ctx, tx, r)
					if err != nil {
						tx.Rollback(ctx)
						return nil, err
					}
					ids = append(ids, id)
				}
				if !commit {
					return ids, tx.Rollback(ctx)
				}
				return ids, tx.Commit(ctx)
			},
			InsertSQL: func(ctx context.Context, exchange, routingKey string, body []byte, contentType, properties string) error {
				_, err := pool.Exec(ctx, `INSERT INTO acemq_outbox (exchange, routing_key, body, content_type, properties)
VALUES ($1, $2, $3, $4, $5)`, exchange, routingKey, body, contentType, properties)
				return err
			},
			LockHeld: func(t *testing.T) (stores.Set, func()) {
				tx, err := pool.Begin(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				// EXCLUSIVE lets readers in and keeps every writer waiting.
				if _, err := tx.Exec(t.Context(), `LOCK TABLE acemq_idempotency, acemq_outbox IN EXCLUSIVE MODE`); err != nil {
					t.Fatal(err)
				}
				held := true
				release := func() {
					if held {
						held = false
						if err := tx.Rollback(context.Background()); err != nil {
							t.Errorf("release the table lock: %v", err)
						}
					}
				}
				t.Cleanup(release)
				impatient := opts
				impatient.LockTimeout = 200 * time.Millisecond
				return storetest.OpenPostgresURL(t, connURL, impatient), release
			},
		}
	}, storetest.Features{Durable: true})
}

func TestSchema(t *testing.T) {
	storetest.RunSchema(t, func(t *testing.T) stores.Set {
		return storetest.OpenPostgresURL(t, testenv.PostgresSchema(t), stores.Options{})
	})
}

// The outbox exists so that one commit decides both the business row and
// the message.
func TestOutboxCommitsWithTheBusinessRow(t *testing.T) {
	ctx := t.Context()
	connURL := testenv.PostgresSchema(t)
	s := storetest.OpenPostgresURL(t, connURL, stores.Options{})
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pool := appPool(t, connURL)
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	place := func(id string, commit bool) {
		t.Helper()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id); err != nil {
				return err
			}
			if _, err := s.Outbox().Add(ctx, tx, stores.OutboxRecord{Exchange: "orders", RoutingKey: "order.placed", Body: []byte(`{"id":"` + id + `"}`)}); err != nil {
				return err
			}
			if !commit {
				return errRollback
			}
			return nil
		})
		if err != nil && err != errRollback {
			t.Fatalf("place order %s: %v", id, err)
		}
	}
	place("o-1", true)
	place("o-2", false)
	place("o-3", true)
	var orders int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		t.Fatal(err)
	}
	pending, err := s.ListPending(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, r := range pending {
		bodies = append(bodies, string(r.Body))
	}
	if orders != 2 || strings.Join(bodies, " ") != `{"id":"o-1"} {"id":"o-3"}` {
		t.Fatalf("after two commits and a rollback: %d orders, outbox %v; want 2 and o-1, o-3", orders, bodies)
	}
}

type rollback struct{}

func (rollback) Error() string { return "rolled back on purpose" }

var errRollback error = rollback{}

func TestOpenNeverShowsThePassword(t *testing.T) {
	_, err := postgres.Open(t.Context(), "postgres://acemq:s3cret-canary@127.0.0.1:1/nowhere?connect_timeout=1", stores.Options{})
	if err == nil {
		t.Fatal("Open on a closed port: nil error")
	}
	if strings.Contains(err.Error(), "s3cret-canary") {
		t.Fatalf("Open error shows the password: %v", err)
	}
}

// TestConfirmWaitingForTheSameConfirmSucceeds confirms a claim while another
// confirm of the same claim holds its row: the second waits, then finds the
// row confirmed with its own token, which counts as done (confirming again
// with the same token succeeds), not as a claim taken over.
func TestConfirmWaitingForTheSameConfirmSucceeds(t *testing.T) {
	ctx := t.Context()
	s := storetest.OpenPostgres(t, stores.Options{})
	c, err := s.TryClaim(ctx, stores.ClaimRequest{Key: "k"})
	if err != nil || c.State != stores.Claimed {
		t.Fatalf("TryClaim = %+v, %v", c, err)
	}
	first, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(context.Background())
	var firstPID int
	if err := first.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&firstPID); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, `UPDATE acemq_idempotency SET state = 'confirmed', confirmed_at = now(), expires_at = now() + interval '1 hour' WHERE key = 'k'`); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() { second <- s.Confirm(ctx, "k", c.Token) }()
	testenv.Eventually(t, 30*time.Second, func() error {
		var waiting int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, firstPID).Scan(&waiting); err != nil {
			return err
		}
		if waiting == 0 {
			return errors.New("the second confirm is not waiting for the first one's row lock yet")
		}
		return nil
	})
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("Confirm after the same claim was confirmed meanwhile = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second confirm did not return within 30s of the first one's commit")
	}
}
