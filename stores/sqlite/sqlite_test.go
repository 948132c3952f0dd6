package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/sqlite"
	"github.com/acemq/acemq-flow/stores/storetest"
)

func open(t *testing.T, path string, opts stores.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// app opens the file the way an application writing outbox records would:
// its own handle, with the store's locking settings.
func app(t *testing.T, path string, busy time.Duration) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqlite.DSN(path, busy.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	storetest.RunAll(t, func(t *testing.T, opts stores.Options) storetest.Backend {
		s := storetest.OpenSQLite(t, opts)
		path := s.Path()
		db := app(t, path, 5*time.Second)
		return storetest.Backend{
			Set:  s,
			Peer: func(t *testing.T) stores.Set { return open(t, path, opts) },
			WriteOutbox: func(ctx context.Context, commit bool, recs ...stores.OutboxRecord) ([]int64, error) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return nil, err
				}
				var ids []int64
				for _, r := range recs {
					id, err := s.Outbox().Add(ctx, tx, r)
					if err != nil {
						tx.Rollback()
						return nil, err
					}
					ids = append(ids, id)
				}
				if !commit {
					return ids, tx.Rollback()
				}
				return ids, tx.Commit()
			},
			InsertSQL: func(ctx context.Context, exchange, routingKey string, body []byte, contentType, properties string) error {
				_, err := db.ExecContext(ctx, `INSERT INTO acemq_outbox (exchange, routing_key, body, content_type, properties)
VALUES (?, ?, ?, ?, ?)`, exchange, routingKey, body, contentType, properties)
				return err
			},
			LockHeld: func(t *testing.T) (stores.Set, func()) {
				release := holdLock(t, path)
				impatient := opts
				impatient.LockTimeout = 100 * time.Millisecond
				return open(t, path, impatient), release
			},
		}
	}, storetest.Features{Durable: true})
}

func TestSchema(t *testing.T) {
	storetest.RunSchema(t, func(t *testing.T) stores.Set {
		return open(t, filepath.Join(t.TempDir(), "fresh.db"), stores.Options{})
	})
}
