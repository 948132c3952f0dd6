package memory_test

import (
	"context"
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/stores/storetest"
)

func TestConformance(t *testing.T) {
	storetest.RunAll(t, func(t *testing.T, opts stores.Options) storetest.Backend {
		s, err := memory.Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return storetest.Backend{
			Set: s,
			// One process, one map: another handle is the same store.
			Peer: func(*testing.T) stores.Set { return s },
			WriteOutbox: func(ctx context.Context, commit bool, recs ...stores.OutboxRecord) ([]int64, error) {
				tx := s.Begin()
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
		}
	}, storetest.Features{Durable: false})
}
