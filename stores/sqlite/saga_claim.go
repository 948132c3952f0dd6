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

// AdvanceSagaConfirmBatch implements stores.SagaClaims: every advance and
// its confirm in one IMMEDIATE transaction, in turn.
func (s *Store) AdvanceSagaConfirmBatch(ctx context.Context, advs []stores.SagaAdvance) ([]stores.SagaAdvanced, error) {
	if len(advs) == 0 {
		return nil, nil
	}
	out := make([]stores.SagaAdvanced, len(advs))
	steps := make([][]byte, len(advs))
	for i, a := range advs {
		if err := stores.CheckSagaInstance(a.Instance); err != nil {
			out[i].Refused = err
			continue
		}
		b, err := backend.EncodeSagaSteps(a.Instance)
		if err != nil {
			return nil, err
		}
		steps[i] = b
	}
	what := fmt.Sprintf("saga %q: advance instance %q from version %d and confirm its claim", advs[0].Instance.Saga, advs[0].Instance.ID, advs[0].Instance.Version)
	if len(advs) > 1 {
		what = fmt.Sprintf("advance a batch of %d saga instances and confirm their claims", len(advs))
	}
	err := s.inTx(ctx, what, func(tx *sql.Tx) error {
		now := backend.SagaTime(s.opts.Now())
		for i, a := range advs {
			if out[i].Refused != nil {
				continue
			}
			stale, err := advanceTx(ctx, tx, a.Instance, steps[i], now)
			if err != nil {
				return fmt.Errorf("saga %q instance %q: %w", a.Instance.Saga, a.Instance.ID, err)
			}
			if stale != nil {
				out[i].Refused = stale
				continue
			}
			if a.Confirm.Token == 0 {
				continue
			}
			if out[i].Unconfirmed, err = s.confirmTx(ctx, tx, a.Confirm); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
