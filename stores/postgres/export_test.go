package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// HeldPool returns the pool ClaimLocked takes its connections from.
func (s *Store) HeldPool() *pgxpool.Pool { return s.held }

// SetHeadScanEvery sets how often a claim made while batches are held reads
// the pending index from its head, until the test ends.
func SetHeadScanEvery(t interface{ Cleanup(func()) }, d time.Duration) {
	old := headScanEvery
	headScanEvery = d
	t.Cleanup(func() { headScanEvery = old })
}

// BatchSetting returns setting name as the transaction of a locked batch
// sees it.
func BatchSetting(b any, name string) (string, error) {
	var v string
	lb := b.(*lockedBatch)
	err := lb.conn.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}
