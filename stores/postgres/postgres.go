// Package postgres is the production store backend: the idempotency store
// and the transactional outbox in PostgreSQL, through a pgx/v5 connection
// pool.
//
// Every statement uses pgx's extended protocol with bound parameters (never
// QueryExecModeSimpleProtocol for a statement with arguments). Tables are
// unqualified and resolved through the connection's search_path, so a store
// lives in whatever schema the URL's search_path names; a caller writing
// outbox records must use a connection with the same search_path.
//
// Concurrency comes from the database: a claim is one INSERT … ON CONFLICT
// DO UPDATE … WHERE expired, so of any number of concurrent claimants on any
// number of replicas exactly one gets the row; a relay batch is leased with
// FOR UPDATE SKIP LOCKED, so two relays never hold the same row.
package postgres

import (
	"context"
	"embed"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations returns the embedded SQL files that create the PostgreSQL
// tables, in the order Migrate applies them.
func Migrations() ([]stores.Migration, error) {
	return backend.LoadMigrations(migrationFS, "migrations")
}

// Store is the PostgreSQL idempotency store and outbox relay side. It is safe
// for concurrent use; Close closes its pools.
type Store struct {
	pool *pgxpool.Pool
	// held serves ClaimLocked: a batch keeps its connection while the relay
	// publishes it, so held batches have a pool of their own and never take
	// the connections claims, confirms and outbox writes need.
	held *pgxpool.Pool
	// heldIDs is what ClaimLocked knows of the batches this store holds
	// open: the highest id of each, and when a claim last read the pending
	// index from its head.
	heldIDs heldIDs
	opts    stores.Options
	once    sync.Once
}

var (
	_ stores.Set          = (*Store)(nil)
	_ stores.OutboxLocker = (*Store)(nil)
)

// defaultConns is the pool's size when the URL sets no pool_max_conns.
// pgx's own default, four on two cores, is the runtime's limit as soon as
// its consumers wait on the store: every saga step and idempotent delivery
// takes a connection for each of its round trips, and a pool of 4 held the
// saga-step bench to about half of what 16 gives (README, Speed). 16 of a
// server's default 100 connections leave room for several replicas.
const defaultConns = 16

// heldConns bounds the connections of batches held open by ClaimLocked (a
// relay holds at most eight at once).
const heldConns = 9

// Open connects a pool to connURL (postgres:// or postgresql://, or a pgx
// key=value string) and pings it. It does not create tables: call Migrate,
// or apply the files Migrations returns. The pool holds up to 16
// connections (defaultConns) unless the URL's pool_max_conns says otherwise;
// ClaimLocked's batches have a pool of their own beside it, of up to 7.
// Options.LockTimeout, when set, becomes the session's lock_timeout. Errors
// never contain the password.
func Open(ctx context.Context, connURL string, opts stores.Options) (*Store, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(connURL)
	if err != nil {
		// pgx redacts the password from its parse errors.
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	if !strings.Contains(connURL, "pool_max_conns") {
		cfg.MaxConns = defaultConns
	}
	if o.LockTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(o.LockTimeout.Milliseconds(), 10)
	}
	where := Redact(connURL)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	// Connects only when a batch is claimed.
	hcfg := cfg.Copy()
	hcfg.MinConns, hcfg.MaxConns = 0, heldConns
	held, err := pgxpool.NewWithConfig(ctx, hcfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	return &Store{pool: pool, held: held, opts: o}, nil
}

// Redact returns connURL with its password replaced, for logs and errors.
func Redact(connURL string) string { return stores.Redact(connURL) }

// Pool returns the store's pool. A caller may begin its outbox transactions
// on it, and must not close it.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Purge implements stores.Set: PurgeExpired, then PurgePublished of the
// records published more than Options.PublishedRetention ago.
func (s *Store) Purge(ctx context.Context) (stores.Purged, error) {
	return backend.Purge(ctx, s, s.opts.Now(), s.opts.PublishedRetention)
}

// Close closes the pools. It is idempotent.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.held.Close()
		s.pool.Close()
	})
	return nil
}

// Migrate applies the embedded migrations not yet recorded in
// acemq_migrations, in one transaction under an advisory lock, so that
// replicas starting together apply each file once.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.acemq_migrations'))`); err != nil {
			return err
		}
		applied := map[int]bool{}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('acemq_migrations') IS NOT NULL`).Scan(&exists); err != nil {
			return err
		}
		if exists {
			rows, err := tx.Query(ctx, `SELECT version FROM acemq_migrations`)
			if err != nil {
				return err
			}
			vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			if err != nil {
				return err
			}
			for _, v := range vs {
				applied[int(v)] = true
			}
		}
		for _, m := range ms {
			if applied[m.Version] {
				continue
			}
			// A migration takes no arguments, so pgx sends it as one
			// multi-statement query; nothing is interpolated into it.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate postgres store: %w", err)
	}
	return nil
}

// CheckSchema returns a *SchemaError (stores.SchemaError) when the tables
// are missing or older than the embedded migrations.
func (s *Store) CheckSchema(ctx context.Context) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	want := ms[len(ms)-1].Version
	var have int32
	err = s.pool.QueryRow(ctx, `SELECT CASE WHEN to_regclass('acemq_migrations') IS NULL THEN -1 ELSE -2 END`).Scan(&have)
	if err != nil {
		return fmt.Errorf("check postgres store schema: %w", err)
	}
	if have == -1 {
		return &stores.SchemaError{Backend: "postgres", Have: -1, Want: want}
	}
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), -1) FROM acemq_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("check postgres store schema: %w", err)
	}
	if int(have) < want {
		return &stores.SchemaError{Backend: "postgres", Have: int(have), Want: want}
	}
	return nil
}
