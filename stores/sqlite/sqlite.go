// Package sqlite is the embedded store backend: the idempotency store and
// the transactional outbox in one SQLite file, through modernc.org/sqlite
// (pure Go, no cgo), so that `acemq-flow run` needs nothing but a broker.
//
// Locking. SQLite has one writer at a time per file. The store opens the
// file in WAL mode (readers never wait for the writer), with busy_timeout
// set to Options.LockTimeout (default 5s), and begins every transaction
// IMMEDIATE, so that a transaction takes the write lock before it reads and
// never fails to upgrade a read lock half-way. Inside one process the store
// queues its writes on one connection; other processes, and a caller's own
// *sql.DB writing outbox records, wait for the lock up to their busy
// timeout. A wait that outlasts it is an error (SQLITE_BUSY), which the
// store returns as an error and never as an answer.
//
// Duplicate claims are decided by looking for the row (INSERT … ON CONFLICT
// DO UPDATE … WHERE expired, RETURNING, then SELECT), never by reading an
// error code.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations returns the embedded SQL files that create the SQLite tables,
// in the order Migrate applies them.
func Migrations() ([]stores.Migration, error) {
	return backend.LoadMigrations(migrationFS, "migrations")
}

// Store is the SQLite idempotency store and outbox relay side. It is safe
// for concurrent use; Close releases the file.
type Store struct {
	db   *sql.DB
	path string
	opts stores.Options
	once sync.Once
	cerr error
}

var _ stores.Set = (*Store)(nil)

// DSN returns the database/sql data source name for path with the settings
// the store relies on (WAL, busy timeout, IMMEDIATE transactions). A program
// that writes outbox records through its own *sql.DB should open it with
// sql.Open("sqlite", sqlite.DSN(path, timeout)) so that its transactions
// wait for the lock the same way.
func DSN(path string, busyTimeout int64) string {
	return path + "?_busy_timeout=" + fmt.Sprint(busyTimeout) +
		"&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate"
}

// Open opens (creating if needed) the SQLite file at path. It does not create
// tables: call Migrate, or apply the files Migrations returns. The returned
// Store must be closed.
func Open(ctx context.Context, path string, opts stores.Options) (*Store, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = stores.DefaultLockTimeout
	}
	switch {
	case path == "":
		return nil, errors.New("open sqlite store: empty path")
	case strings.ContainsRune(path, '?') || strings.Contains(path, ":memory:") || strings.HasPrefix(path, "file:"):
		return nil, fmt.Errorf("open sqlite store %q: want a plain file path (for a throwaway store use memory:)", path)
	}
	// SQLite creates the file but not its directory, and says only "unable
	// to open database file" when the directory is missing.
	if dir := filepath.Dir(path); dir != "." {
		fi, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("open sqlite store %q: directory %q does not exist; create it or choose another path", path, dir)
		case err == nil && !fi.IsDir():
			return nil, fmt.Errorf("open sqlite store %q: %q is a file, not a directory; choose another path", path, dir)
		}
	}
	db, err := sql.Open("sqlite", DSN(path, o.LockTimeout.Milliseconds()))
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	// One connection: writes queue here in Go instead of spinning on the
	// file lock; other processes still meet busy_timeout.
	db.SetMaxOpenConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	return &Store{db: db, path: path, opts: o}, nil
}

// DB returns the store's handle, which holds one connection. A caller may
// begin its outbox transactions on it (they then queue with the store's own
// writes), must not call the store while holding one (the store would wait
// for the connection the caller holds), and must not close it. A separate
// handle opened with DSN has neither restriction.
func (s *Store) DB() *sql.DB { return s.db }

// Purge implements stores.Set: PurgeExpired, then PurgePublished of the
// records published more than Options.PublishedRetention ago.
func (s *Store) Purge(ctx context.Context) (stores.Purged, error) {
	return backend.Purge(ctx, s, s.opts.Now(), s.opts.PublishedRetention)
}

// Close closes the file. It is idempotent.
func (s *Store) Close() error {
	s.once.Do(func() { s.cerr = s.db.Close() })
	return s.cerr
}

// Migrate applies the embedded migrations not yet recorded in
// acemq_migrations, in one transaction.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	return s.inTx(ctx, "migrate sqlite store", func(tx *sql.Tx) error {
		applied := map[int]bool{}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'acemq_migrations'`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			rows, err := tx.QueryContext(ctx, `SELECT version FROM acemq_migrations`)
			if err != nil {
				return err
			}
			for rows.Next() {
				var v int
				if err := rows.Scan(&v); err != nil {
					rows.Close()
					return err
				}
				applied[v] = true
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		for _, m := range ms {
			if applied[m.Version] {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
		}
		return nil
	})
}

// CheckSchema returns a *SchemaError (stores.SchemaError) when the tables
// are missing or older than the embedded migrations.
func (s *Store) CheckSchema(ctx context.Context) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	want := ms[len(ms)-1].Version
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'acemq_migrations'`).Scan(&n); err != nil {
		return fmt.Errorf("check sqlite store schema: %w", err)
	}
	if n == 0 {
		return &stores.SchemaError{Backend: "sqlite", Have: -1, Want: want}
	}
	var have int
	if err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(version), -1) FROM acemq_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("check sqlite store schema: %w", err)
	}
	if have < want {
		return &stores.SchemaError{Backend: "sqlite", Have: have, Want: want}
	}
	return nil
}

// inTx runs fn in one IMMEDIATE transaction and commits it.
func (s *Store) inTx(ctx context.Context, what string, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: commit: %w", what, err)
	}
	return nil
}
