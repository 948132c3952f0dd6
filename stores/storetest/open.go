package storetest

import (
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/stores/sqlite"
	"github.com/acemq/acemq-flow/test/testenv"
)

// OpenPostgres opens a migrated PostgreSQL store in a schema of its own
// (testenv.PostgresSchema: skipped when ACEMQ_TEST_POSTGRES_URL is unset,
// failed when it is unreachable), closed in t.Cleanup before the schema is
// dropped.
func OpenPostgres(t testing.TB, opts stores.Options) *postgres.Store {
	t.Helper()
	s, _ := OpenPostgresSchema(t, opts)
	return s
}

// OpenPostgresSchema is OpenPostgres that also returns the store's URL, for
// a test that hands the same schema to something else (a binary, a second
// store).
func OpenPostgresSchema(t testing.TB, opts stores.Options) (*postgres.Store, string) {
	t.Helper()
	connURL := testenv.PostgresSchema(t)
	s := OpenPostgresURL(t, connURL, opts)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s, connURL
}

// OpenPostgresURL opens a PostgreSQL store on connURL (typically from
// testenv.PostgresSchema) without migrating, and closes it in t.Cleanup.
func OpenPostgresURL(t testing.TB, connURL string, opts stores.Options) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), connURL, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// AddPostgres writes recs to s's outbox in one committed transaction.
func AddPostgres(t testing.TB, s *postgres.Store, recs ...stores.OutboxRecord) {
	t.Helper()
	ctx := t.Context()
	err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		for _, r := range recs {
			if _, err := s.Outbox().Add(ctx, tx, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// OpenSQLite opens a migrated SQLite store on a new file under t.TempDir()
// and closes it in t.Cleanup.
func OpenSQLite(t testing.TB, opts stores.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "acemq.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}
