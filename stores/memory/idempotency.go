package memory

import (
	"context"
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

// TryClaimBatch implements stores.Idempotency.
func (s *Store) TryClaimBatch(ctx context.Context, reqs []stores.ClaimRequest) ([]stores.Claim, error) {
	leases, err := s.opts.Leases(reqs)
	if err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return s.claimLocked(reqs, leases), nil
}

// claimLocked answers reqs, with s.mu held.
func (s *Store) claimLocked(reqs []stores.ClaimRequest, leases []time.Duration) []stores.Claim {
	now := s.opts.Now()
	firsts, firstOf := backend.Dedupe(reqs)
	out := make([]stores.Claim, len(reqs))
	for _, i := range firsts {
		r := reqs[i]
		c, ok := s.claims[r.Key]
		if ok && c.expiresAt > now.UnixNano() {
			state := stores.InProgress
			if c.confirmed {
				state = stores.AlreadyConfirmed
			}
			out[i] = stores.Claim{State: state, Owner: c.owner, ExpiresAt: time.Unix(0, c.expiresAt)}
			continue
		}
		s.token++
		exp := now.Add(leases[i])
		s.claims[r.Key] = &claim{token: s.token, owner: r.Owner, expiresAt: exp.UnixNano()}
		out[i] = stores.Claim{State: stores.Claimed, Token: s.token, Owner: r.Owner, ExpiresAt: exp}
	}
	backend.Spread(out, firstOf)
	return out
}

// Confirm implements stores.Idempotency.
func (s *Store) Confirm(ctx context.Context, key string, token stores.Token) error {
	refused, err := s.ConfirmBatch(ctx, []stores.Held{{Key: key, Token: token}})
	if err != nil {
		return err
	}
	return refused[0]
}

// ConfirmBatch implements stores.Idempotency.
func (s *Store) ConfirmBatch(ctx context.Context, held []stores.Held) ([]error, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	refused := make([]error, len(held))
	for i, h := range held {
		refused[i] = s.confirmLocked(h)
	}
	return refused, nil
}

// confirmLocked confirms h, with s.mu held, or says why not.
func (s *Store) confirmLocked(h stores.Held) error {
	c, ok := s.claims[h.Key]
	switch {
	case !ok:
		return backend.Stale(h.Key, h.Token, 0, false)
	case c.token != h.Token:
		return backend.Stale(h.Key, h.Token, c.token, c.confirmed)
	case !c.confirmed:
		c.confirmed = true
		c.expiresAt = s.opts.Now().Add(s.opts.Retention).UnixNano()
	}
	return nil
}

// Release implements stores.Idempotency.
func (s *Store) Release(ctx context.Context, key string, token stores.Token) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	c, ok := s.claims[key]
	switch {
	case !ok:
		return backend.Stale(key, token, 0, false)
	case c.token != token || c.confirmed:
		return backend.Stale(key, token, c.token, c.confirmed)
	}
	delete(s.claims, key)
	return nil
}

// PurgeExpired implements stores.Idempotency.
func (s *Store) PurgeExpired(ctx context.Context) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	now := s.opts.Now().UnixNano()
	var n int64
	for k, c := range s.claims {
		if c.expiresAt <= now {
			delete(s.claims, k)
			n++
		}
	}
	return n, nil
}
