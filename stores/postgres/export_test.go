package postgres

import (
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
