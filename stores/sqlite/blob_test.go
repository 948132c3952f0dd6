package sqlite_test

import (
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
)

func TestBlobConformance(t *testing.T) {
	storetest.RunBlobs(t, func(t *testing.T, opts stores.Options) storetest.BlobBackend {
		s := storetest.OpenSQLite(t, opts)
		path := s.Path()
		db := app(t, path, 5*time.Second)
		return storetest.BlobBackend{
			Blobs: s,
			Peer:  func(t *testing.T) stores.Blobs { return open(t, path, opts) },
			Corrupt: func(t *testing.T, key string) {
				// One bit of the first byte flipped in the row, the size kept.
				var content []byte
				if err := db.QueryRowContext(t.Context(), `SELECT content FROM acemq_blobs WHERE key = ?`, key).Scan(&content); err != nil || len(content) == 0 {
					t.Fatalf("corrupt blob %s: %v (%d bytes)", key, err, len(content))
				}
				content[0] ^= 1
				res, err := db.ExecContext(t.Context(), `UPDATE acemq_blobs SET content = ? WHERE key = ?`, content, key)
				if err != nil {
					t.Fatalf("corrupt blob %s: %v", key, err)
				}
				if n, _ := res.RowsAffected(); n != 1 {
					t.Fatalf("corrupt blob %s: %d rows", key, n)
				}
			},
		}
	}, storetest.Features{Durable: true})
}
