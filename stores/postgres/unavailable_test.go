package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/test/testenv"
)

func TestConnectionClass(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a backend terminated by an administrator is the server's", &pgconn.PgError{Code: "57P01"}, true},
		{"a server starting up is the server's", &pgconn.PgError{Code: "57P03"}, true},
		{"a connection exception is the server's", fmt.Errorf("confirm: %w", &pgconn.PgError{Code: "08006"}), true},
		{"too many connections is the server's", &pgconn.PgError{Code: "53300"}, true},
		{"a unique violation is the statement's", &pgconn.PgError{Code: "23505"}, false},
		{"a lock timeout is the statement's", &pgconn.PgError{Code: "55P03"}, false},
		{"a connection closed under the statement is the server's", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"a closed pgconn is the server's", pgconn.ErrConnClosed, true},
		{"the caller's cancellation is the caller's", ctx.Err(), false},
		{"no rows is nobody's failure", pgx.ErrNoRows, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := connectionClass(tc.err); got != tc.want {
				t.Errorf("connectionClass(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestATerminatedBackendIsAnOutage terminates the store's backend while
// its confirm waits for a row lock (pg_terminate_backend, as S11 of the
// reliability suite does every few seconds): the confirm fails with an
// error matching stores.ErrUnavailable, which the runtime waits out and
// retries, and the same confirm succeeds on the pool's next connection.
func TestATerminatedBackendIsAnOutage(t *testing.T) {
	ctx := t.Context()
	app := fmt.Sprintf("acemq_outage_%d", time.Now().UnixNano())
	base := testenv.PostgresSchema(t)
	s, err := Open(ctx, base+"&pool_max_conns=1&application_name="+app, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := s.TryClaim(ctx, stores.ClaimRequest{Key: "k", Owner: "me", Lease: time.Hour})
	if err != nil || c.State != stores.Claimed {
		t.Fatalf("TryClaim(k) = %v, %v; want claimed", c.State, err)
	}
	other, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1 FROM acemq_idempotency WHERE key = 'k' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	confirmed := make(chan error, 1)
	go func() { confirmed <- s.Confirm(ctx, "k", c.Token) }()
	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the confirm never waited for the row lock")
		}
		err := other.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&pid)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if pid == 0 {
			time.Sleep(20 * time.Millisecond) // pg_stat_activity has no event to wait on
		}
	}
	if _, err := other.Exec(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-confirmed:
		var u *stores.UnavailableError
		if !errors.Is(err, stores.ErrUnavailable) || !errors.As(err, &u) || u.Backend != "postgres" {
			t.Fatalf("Confirm on a terminated backend = %v, want a postgres *stores.UnavailableError", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Confirm did not return within 30s of its backend's termination")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Confirm(ctx, "k", c.Token); err != nil {
		t.Fatalf("Confirm again, on a new connection: %v, want nil", err)
	}
}
