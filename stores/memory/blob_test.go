package memory_test

import (
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/stores/storetest"
)

func TestBlobConformance(t *testing.T) {
	storetest.RunBlobs(t, func(t *testing.T, opts stores.Options) storetest.BlobBackend {
		s, err := memory.OpenBlobs(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return storetest.BlobBackend{
			Blobs: s,
			// One process, one map: another handle is the same store.
			Peer:    func(*testing.T) stores.Blobs { return s },
			Corrupt: func(_ *testing.T, key string) { memory.CorruptBlob(s, key) },
		}
	}, storetest.Features{Durable: false})
}
