package memory

import (
	"context"

	"github.com/acemq/acemq-flow/stores"
)

var _ stores.SagaClaims = (*Store)(nil)

// ClaimSagaBatch implements stores.SagaClaims: the claims and the reads
// under one lock.
func (s *Store) ClaimSagaBatch(ctx context.Context, reqs []stores.SagaClaimRequest) ([]stores.SagaClaim, error) {
	claims := make([]stores.ClaimRequest, len(reqs))
	for i, r := range reqs {
		claims[i] = r.ClaimRequest
	}
	leases, err := s.opts.Leases(claims)
	if err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	answers := s.claimLocked(claims, leases)
	out := make([]stores.SagaClaim, len(reqs))
	for i, c := range answers {
		out[i].Claim = c
		if inst, ok := s.sagas[reqs[i].Instance]; ok {
			out[i].Instance, out[i].Found = cloneSaga(inst), true
		}
	}
	return out, nil
}
