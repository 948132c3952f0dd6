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
		if c.State == stores.InProgress {
			continue
		}
		if inst, ok := s.sagas[reqs[i].Instance]; ok {
			out[i].Instance, out[i].Found = cloneSaga(inst), true
		}
	}
	return out, nil
}

// AdvanceSagaConfirmBatch implements stores.SagaClaims: each advance and
// its confirm under one lock, in turn.
func (s *Store) AdvanceSagaConfirmBatch(ctx context.Context, advs []stores.SagaAdvance) ([]stores.SagaAdvanced, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]stores.SagaAdvanced, len(advs))
	for i, a := range advs {
		if err := stores.CheckSagaInstance(a.Instance); err != nil {
			out[i].Refused = err
			continue
		}
		if _, err := s.advanceLocked(a.Instance); err != nil {
			out[i].Refused = err
			continue
		}
		if a.Confirm.Token != 0 {
			out[i].Unconfirmed = s.confirmLocked(a.Confirm)
		}
	}
	return out, nil
}
