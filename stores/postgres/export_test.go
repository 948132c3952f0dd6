package postgres

import "github.com/jackc/pgx/v5/pgxpool"

// HeldPool returns the pool ClaimLocked takes its connections from.
func (s *Store) HeldPool() *pgxpool.Pool { return s.held }

// SetPurgeBatch sets the rows a purge statement handles until the test ends.
func SetPurgeBatch(t interface{ Cleanup(func()) }, n int) {
	old := purgeBatch
	purgeBatch = n
	t.Cleanup(func() { purgeBatch = old })
}
