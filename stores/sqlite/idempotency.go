package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

// TryClaim implements stores.Idempotency.
func (s *Store) TryClaim(ctx context.Context, r stores.ClaimRequest) (stores.Claim, error) {
	out, err := s.TryClaimBatch(ctx, []stores.ClaimRequest{r})
	if err != nil {
		return stores.Claim{}, err
	}
	return out[0], nil
}

const claimSQL = `
INSERT INTO acemq_idempotency (key, state, token, owner, claimed_at, expires_at)
VALUES (?1, 'claimed', ?2, ?3, ?4, ?5)
ON CONFLICT (key) DO UPDATE SET
    state = 'claimed', token = excluded.token, owner = excluded.owner,
    claimed_at = excluded.claimed_at, confirmed_at = NULL, expires_at = excluded.expires_at
WHERE acemq_idempotency.expires_at <= ?4
RETURNING token`

// TryClaimBatch implements stores.Idempotency: all claims in one
// transaction.
func (s *Store) TryClaimBatch(ctx context.Context, reqs []stores.ClaimRequest) ([]stores.Claim, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	leases, err := s.opts.Leases(reqs)
	if err != nil {
		return nil, err
	}
	firsts, firstOf := backend.Dedupe(reqs)
	out := make([]stores.Claim, len(reqs))
	err = s.inTx(ctx, claimWhat(reqs), func(tx *sql.Tx) error {
		return s.claimTx(ctx, tx, reqs, leases, firsts, out)
	})
	if err != nil {
		return nil, err
	}
	backend.Spread(out, firstOf)
	return out, nil
}

// claimTx claims reqs[firsts...] in tx and fills out.
func (s *Store) claimTx(ctx context.Context, tx *sql.Tx, reqs []stores.ClaimRequest, leases []time.Duration, firsts []int, out []stores.Claim) error {
	now := s.opts.Now()
	var last int64
	err := tx.QueryRowContext(ctx, `UPDATE acemq_idempotency_token SET value = value + ? WHERE id = 1 RETURNING value`, len(firsts)).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return errors.New("fencing counter row missing from acemq_idempotency_token; run `acemq-flow migrate`")
	}
	if err != nil {
		return err
	}
	next := stores.Token(last) - stores.Token(len(firsts))
	for _, i := range firsts {
		r := reqs[i]
		next++
		exp := now.Add(leases[i])
		var tok int64
		err := tx.QueryRowContext(ctx, claimSQL, r.Key, int64(next), r.Owner, now.UnixMilli(), exp.UnixMilli()).Scan(&tok)
		if err == nil {
			out[i] = stores.Claim{State: stores.Claimed, Token: stores.Token(tok), Owner: r.Owner, ExpiresAt: time.UnixMilli(exp.UnixMilli())}
			continue
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("idempotency key %q: %w", r.Key, err)
		}
		// Nothing inserted or taken over: the row exists and is live.
		// Look at it; the write lock this transaction holds keeps it there.
		c, found, err := current(ctx, tx, r.Key)
		if err != nil {
			return fmt.Errorf("idempotency key %q: %w", r.Key, err)
		}
		if !found {
			return fmt.Errorf("idempotency key %q: claim neither inserted nor found", r.Key)
		}
		out[i] = c
	}
	return nil
}

func claimWhat(reqs []stores.ClaimRequest) string {
	if len(reqs) == 1 {
		return "claim"
	}
	return fmt.Sprintf("claim batch of %d", len(reqs))
}

// current reads the row for key as the answer a claimant gets when it could
// not claim.
func current(ctx context.Context, tx *sql.Tx, key string) (stores.Claim, bool, error) {
	var state, owner string
	var exp int64
	err := tx.QueryRowContext(ctx, `SELECT state, owner, expires_at FROM acemq_idempotency WHERE key = ?`, key).Scan(&state, &owner, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return stores.Claim{}, false, nil
	}
	if err != nil {
		return stores.Claim{}, false, err
	}
	c := stores.Claim{State: stores.InProgress, Owner: owner, ExpiresAt: time.UnixMilli(exp)}
	if state == "confirmed" {
		c.State = stores.AlreadyConfirmed
	}
	return c, true, nil
}

// stale reads what holds key now, to explain a refusal.
func stale(ctx context.Context, tx *sql.Tx, key string, presented stores.Token) error {
	var state string
	var tok int64
	err := tx.QueryRowContext(ctx, `SELECT state, token FROM acemq_idempotency WHERE key = ?`, key).Scan(&state, &tok)
	if errors.Is(err, sql.ErrNoRows) {
		return backend.Stale(key, presented, 0, false)
	}
	if err != nil {
		return fmt.Errorf("idempotency key %q: %w", key, err)
	}
	return backend.Stale(key, presented, stores.Token(tok), state == "confirmed")
}

// Confirm implements stores.Idempotency.
func (s *Store) Confirm(ctx context.Context, key string, token stores.Token) error {
	refused, err := s.ConfirmBatch(ctx, []stores.Held{{Key: key, Token: token}})
	if err != nil {
		return err
	}
	return refused[0]
}

// ConfirmBatch implements stores.Idempotency: all confirms in one
// transaction.
func (s *Store) ConfirmBatch(ctx context.Context, held []stores.Held) ([]error, error) {
	if len(held) == 0 {
		return nil, nil
	}
	refused := make([]error, len(held))
	what := "confirm"
	if len(held) > 1 {
		what = fmt.Sprintf("confirm batch of %d", len(held))
	}
	err := s.inTx(ctx, what, func(tx *sql.Tx) error {
		for i, h := range held {
			var err error
			if refused[i], err = s.confirmTx(ctx, tx, h); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return refused, nil
}

// confirmTx confirms h in tx: refused is its *StaleClaimError, err a
// failure of the store.
func (s *Store) confirmTx(ctx context.Context, tx *sql.Tx, h stores.Held) (refused, err error) {
	now := s.opts.Now()
	res, err := tx.ExecContext(ctx, `
UPDATE acemq_idempotency SET
    confirmed_at = coalesce(confirmed_at, ?1),
    expires_at = CASE WHEN state = 'claimed' THEN ?2 ELSE expires_at END,
    state = 'confirmed'
WHERE key = ?3 AND token = ?4`, now.UnixMilli(), now.Add(s.opts.Retention).UnixMilli(), h.Key, int64(h.Token))
	if err != nil {
		return nil, fmt.Errorf("idempotency key %q: %w", h.Key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, err
	}
	if n == 1 {
		return nil, nil
	}
	err = stale(ctx, tx, h.Key, h.Token)
	if !errors.Is(err, stores.ErrStaleClaim) {
		return nil, err
	}
	return err, nil
}

// Release implements stores.Idempotency.
func (s *Store) Release(ctx context.Context, key string, token stores.Token) error {
	var refused error
	err := s.inTx(ctx, "release", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM acemq_idempotency WHERE key = ? AND token = ? AND state = 'claimed'`, key, int64(token))
		if err != nil {
			return fmt.Errorf("idempotency key %q: %w", key, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			refused = stale(ctx, tx, key, token)
			if !errors.Is(refused, stores.ErrStaleClaim) {
				return refused
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return refused
}

// PurgeExpired implements stores.Idempotency.
//
// It deletes backend.PurgeBatch rows a statement, so that a large purge holds
// the write lock briefly, batch after batch, and other processes' claims do
// not time out waiting for it.
func (s *Store) PurgeExpired(ctx context.Context) (int64, error) {
	return backend.PurgeInBatches(func(limit int, purged int64) (int64, error) {
		res, err := s.db.ExecContext(ctx, `DELETE FROM acemq_idempotency WHERE key IN (
    SELECT key FROM acemq_idempotency WHERE expires_at <= ?1 LIMIT ?2)`, s.opts.Now().UnixMilli(), limit)
		if err != nil {
			return 0, fmt.Errorf("purge expired idempotency rows (%d purged before the failure): %w", purged, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("purge expired idempotency rows: %w", err)
		}
		return n, nil
	})
}
