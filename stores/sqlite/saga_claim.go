package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

var _ stores.SagaClaims = (*Store)(nil)

// ClaimSagaBatch implements stores.SagaClaims: the claims, then the reads
// of their instances, in one IMMEDIATE transaction, whose write lock no
// other writer passes.
func (s *Store) ClaimSagaBatch(ctx context.Context, reqs []stores.SagaClaimRequest) ([]stores.SagaClaim, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	claims := make([]stores.ClaimRequest, len(reqs))
	for i, r := range reqs {
		claims[i] = r.ClaimRequest
	}
	leases, err := s.opts.Leases(claims)
	if err != nil {
		return nil, err
	}
	firsts, firstOf := backend.Dedupe(claims)
	answers := make([]stores.Claim, len(reqs))
	out := make([]stores.SagaClaim, len(reqs))
	err = s.inTx(ctx, "saga "+claimWhat(claims), func(tx *sql.Tx) error {
		if err := s.claimTx(ctx, tx, claims, leases, firsts, answers); err != nil {
			return err
		}
		for _, i := range firsts {
			if answers[i].State == stores.InProgress {
				continue
			}
			inst, ok, err := scanSaga(tx.QueryRowContext(ctx, `SELECT `+sagaColumns+` FROM acemq_sagas WHERE id = ?1`, reqs[i].Instance))
			if err != nil {
				return fmt.Errorf("saga instance %q: read it: %w", reqs[i].Instance, err)
			}
			out[i].Instance, out[i].Found = inst, ok
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	backend.Spread(answers, firstOf)
	for i, j := range firstOf {
		out[i].Claim = answers[i]
		if i != j {
			out[i].Instance, out[i].Found = out[j].Instance, out[j].Found
		}
	}
	return out, nil
}
