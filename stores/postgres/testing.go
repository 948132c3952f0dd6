package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores/internal/core"
	"github.com/acemq/acemq-flow/test/testenv"
	"github.com/jackc/pgx/v5"
)

// TestURL creates a schema of its own for one test in the database
// ACEMQ_TEST_POSTGRES_URL names (testenv.Postgres: skipped when unset, failed
// when unreachable), drops it with everything in it in t.Cleanup, and
// returns the URL with search_path set to it. Every pool opened on that URL
// sees only that schema.
func TestURL(t testing.TB) string {
	t.Helper()
	base := testenv.Postgres(t)
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	schema := "acemq_test_" + hex.EncodeToString(b)
	admin, err := pgx.Connect(t.Context(), base)
	if err != nil {
		t.Fatalf("connect to %s: %v", Redact(base), err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(t.Context(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create test schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// OpenTest opens a migrated store in a schema of its own (see TestURL) and
// closes it in t.Cleanup, before the schema is dropped.
func OpenTest(t testing.TB, opts core.Options) *Store {
	t.Helper()
	s := OpenTestURL(t, TestURL(t), opts)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// OpenTestURL opens a store on connURL (typically from TestURL) without
// migrating, and closes it in t.Cleanup.
func OpenTestURL(t testing.TB, connURL string, opts core.Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), connURL, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
