package stores

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/stores/internal/core"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/stores/sqlite"
)

// Options tune a store; the zero value gives the defaults.
//
//   - ClaimTimeout: the default lease of an idempotency claim (5m). Set it
//     comfortably above the slowest handler. It may not exceed Retention.
//   - Retention: how long a confirmation is kept (7 days, 168h). It must
//     outlast the longest retry ladder plus any manual replay, or a late
//     duplicate is handled again.
//   - OutboxMaxAttempts: failed publishes after which an outbox row is
//     stuck (10).
//   - OutboxRetryDelay: how long a failed outbox row waits before it is
//     handed out again (5s).
//   - LockTimeout: how long a statement waits for a lock held elsewhere
//     before failing with an error: SQLite's busy_timeout (default 5s) and
//     PostgreSQL's lock_timeout (default: the server's setting).
//   - Now: the clock leases and retention are computed from (time.Now).
//     Replicas sharing a database must have clocks that agree to well within
//     the claim timeout. Tests pass a fake clock.
type Options = core.Options

// Defaults for Options fields left zero.
const (
	DefaultClaimTimeout      = core.DefaultClaimTimeout
	DefaultRetention         = core.DefaultRetention
	DefaultOutboxMaxAttempts = core.DefaultOutboxMaxAttempts
	DefaultOutboxRetryDelay  = core.DefaultOutboxRetryDelay
)

// Migration is one embedded schema file of a backend: Version orders them,
// Name is the file name (0001_idempotency.sql) and SQL its text, exactly what
// Migrate runs.
type Migration = core.Migration

// SchemaError is returned by CheckSchema when a store's tables are missing
// (Have < 0) or behind the embedded migrations (Have < Want). Its message
// tells the operator to run `acemq-flow migrate`.
type SchemaError = core.SchemaError

// Set is what every backend provides behind one store URL: the idempotency
// store and the relay side of the outbox, plus schema management. The
// outbox write side depends on the backend's transaction type; get it from
// the concrete store (postgres.Store.Outbox, sqlite.Store.Outbox,
// memory.Store.Outbox).
//
// Lifecycle: Open; at start-up either Migrate (development, `run
// --create-schema`, `acemq-flow migrate`) or CheckSchema (production, where
// the operator applies the migrations); use; Close. Nothing creates tables
// unless Migrate is called. A Set is safe for concurrent use; Close is
// idempotent and must not race with other calls.
type Set interface {
	Idempotency
	OutboxRelay

	// Migrate applies the backend's embedded migrations that are not yet
	// recorded in acemq_migrations. Concurrent Migrate calls are safe.
	Migrate(ctx context.Context) error

	// CheckSchema returns a *SchemaError when the tables are missing or
	// older than this build expects, and nil when they are current.
	CheckSchema(ctx context.Context) error

	// Close releases the connections (memory: discards the data).
	Close() error
}

var (
	_ Set = (*memory.Store)(nil)
	_ Set = (*sqlite.Store)(nil)
	_ Set = (*postgres.Store)(nil)

	_ Outbox[*memory.Tx] = memory.Outbox{}
	_ Outbox[*sql.Tx]    = sqlite.Outbox{}
	_ Outbox[pgx.Tx]     = postgres.Outbox{}
)

// Redact returns a store URL with its password hidden, for logs and errors,
// whatever characters the password holds.
func Redact(storeURL string) string { return core.Redact(storeURL) }

// Backend names the store a URL selects: "postgres", "sqlite" or "memory".
func Backend(storeURL string) (string, error) {
	scheme, _, ok := strings.Cut(storeURL, ":")
	if !ok {
		// Not echoed: without a scheme there is no telling which part is a
		// password.
		return "", fmt.Errorf("store URL has no scheme; want postgres://…, sqlite:PATH or memory:")
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return "postgres", nil
	case "sqlite", "sqlite3":
		return "sqlite", nil
	case "memory":
		return "memory", nil
	}
	// The URL itself is not echoed: with an unknown scheme there is no
	// telling which part is a password.
	return "", fmt.Errorf("store URL has the unknown scheme %q; want postgres://…, sqlite:PATH or memory:", scheme)
}

// Open connects to the store storeURL names:
//
//   - postgres://user@host:5432/db?sslmode=verify-full (or postgresql://): a
//     pgx connection pool; any query parameter pgx accepts, including
//     search_path, pool_max_conns and lock_timeout, passes through.
//   - sqlite:PATH (sqlite:/var/lib/acemq/flow.db, sqlite:flow.db,
//     sqlite:///abs/path.db): one SQLite file, created if missing.
//   - memory: an empty in-process store, for tests.
//
// Open does not create tables; see Set. Errors never contain a password.
func Open(ctx context.Context, storeURL string, opts Options) (Set, error) {
	backend, err := Backend(storeURL)
	if err != nil {
		return nil, err
	}
	switch backend {
	case "postgres":
		return postgres.Open(ctx, storeURL, opts)
	case "sqlite":
		return sqlite.Open(ctx, SQLitePath(storeURL), opts)
	default:
		return memory.Open(opts)
	}
}

// SQLitePath returns the file path of a sqlite: URL.
func SQLitePath(storeURL string) string {
	_, p, _ := strings.Cut(storeURL, ":")
	p = strings.TrimPrefix(p, "//") // sqlite:///abs → /abs, sqlite://rel → rel
	return p
}

// Migrations returns the embedded migrations of the backend storeURL
// selects (memory has none), without connecting.
func Migrations(storeURL string) ([]Migration, error) {
	backend, err := Backend(storeURL)
	if err != nil {
		return nil, err
	}
	switch backend {
	case "postgres":
		return postgres.Migrations()
	case "sqlite":
		return sqlite.Migrations()
	}
	return nil, nil
}

// WriteMigrations writes the SQL of the backend storeURL selects to w, each
// file preceded by a "-- name" line: what `acemq-flow migrate --print`
// prints, and exactly what Migrate runs.
func WriteMigrations(w io.Writer, storeURL string) error {
	ms, err := Migrations(storeURL)
	if err != nil {
		return err
	}
	backend, _ := Backend(storeURL)
	if len(ms) == 0 {
		_, err := fmt.Fprintf(w, "-- the %s store has no tables\n", backend)
		return err
	}
	for i, m := range ms {
		sep := "\n"
		if i == 0 {
			sep = ""
		}
		if _, err := fmt.Fprintf(w, "%s-- %s (%s)\n%s", sep, m.Name, backend, m.SQL); err != nil {
			return err
		}
		if !strings.HasSuffix(m.SQL, "\n") {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
	}
	return nil
}
