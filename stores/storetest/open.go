package storetest

import (
	"path/filepath"
	"testing"

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
	s := OpenPostgresURL(t, testenv.PostgresSchema(t), opts)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
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
