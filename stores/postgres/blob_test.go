package postgres_test

import (
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

func TestBlobConformance(t *testing.T) {
	storetest.RunBlobs(t, func(t *testing.T, opts stores.Options) storetest.BlobBackend {
		connURL := testenv.PostgresSchema(t)
		s := storetest.OpenPostgresURL(t, connURL, opts)
		if err := s.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		pool := appPool(t, connURL)
		return storetest.BlobBackend{
			Blobs: s,
			Peer:  func(t *testing.T) stores.Blobs { return storetest.OpenPostgresURL(t, connURL, opts) },
			Corrupt: func(t *testing.T, key string) {
				// One bit of the first byte flipped in the row, the size kept.
				tag, err := pool.Exec(t.Context(), `UPDATE acemq_blobs SET content = set_byte(content, 0, get_byte(content, 0) # 1) WHERE key = $1`, key)
				if err != nil || tag.RowsAffected() != 1 {
					t.Fatalf("corrupt blob %s: %v, %d rows", key, err, tag.RowsAffected())
				}
			},
		}
	}, storetest.Features{Durable: true})
}
