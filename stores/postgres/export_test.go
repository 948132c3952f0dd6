package postgres

import "github.com/jackc/pgx/v5/pgxpool"

// HeldPool returns the pool ClaimLocked takes its connections from.
func (s *Store) HeldPool() *pgxpool.Pool { return s.held }
