package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

var _ stores.Sagas = (*Store)(nil)

const sagaColumns = `id, saga, state, step, input, reply_to, correlation_id, steps, version, started_at, updated_at, ended_at`

// CreateSaga implements stores.Sagas: one INSERT … ON CONFLICT DO NOTHING in
// an IMMEDIATE transaction, which reads the existing instance when the
// insert did nothing.
func (s *Store) CreateSaga(ctx context.Context, inst stores.SagaInstance) (stores.SagaInstance, bool, error) {
	if err := stores.CheckSagaInstance(inst); err != nil {
		return stores.SagaInstance{}, false, err
	}
	steps, err := backend.EncodeSagaSteps(inst)
	if err != nil {
		return stores.SagaInstance{}, false, err
	}
	now := backend.SagaTime(s.opts.Now())
	var (
		out     stores.SagaInstance
		created bool
	)
	err = s.inTx(ctx, fmt.Sprintf("saga %q: create instance %q", inst.Saga, inst.ID), func(tx *sql.Tx) error {
		var ended sql.NullInt64
		if inst.State.Ended() {
			ended = sql.NullInt64{Int64: now.UnixMilli(), Valid: true}
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO acemq_sagas (`+sagaColumns+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, ?9, ?9, ?10) ON CONFLICT (id) DO NOTHING`,
			inst.ID, inst.Saga, string(inst.State), inst.Step, blob(inst.Input), inst.ReplyTo, inst.CorrelationID, string(steps), now.UnixMilli(), ended)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		created = n == 1
		var ok bool
		out, ok, err = scanSaga(tx.QueryRowContext(ctx, `SELECT `+sagaColumns+` FROM acemq_sagas WHERE id = ?1`, inst.ID))
		if err == nil && !ok {
			err = errors.New("the instance is missing right after its insert")
		}
		return err
	})
	if err != nil {
		return stores.SagaInstance{}, false, err
	}
	return out, created, nil
}

// GetSaga implements stores.Sagas.
func (s *Store) GetSaga(ctx context.Context, id string) (stores.SagaInstance, bool, error) {
	inst, ok, err := scanSaga(s.db.QueryRowContext(ctx, `SELECT `+sagaColumns+` FROM acemq_sagas WHERE id = ?1`, id))
	if err != nil {
		return stores.SagaInstance{}, false, fmt.Errorf("saga instance %q: read it: %w", id, err)
	}
	return inst, ok, nil
}

// AdvanceSaga implements stores.Sagas: one UPDATE … WHERE version = the
// presented one, in an IMMEDIATE transaction that reads the current
// version when it updated nothing.
func (s *Store) AdvanceSaga(ctx context.Context, inst stores.SagaInstance) (stores.SagaInstance, error) {
	if err := stores.CheckSagaInstance(inst); err != nil {
		return stores.SagaInstance{}, err
	}
	steps, err := backend.EncodeSagaSteps(inst)
	if err != nil {
		return stores.SagaInstance{}, err
	}
	now := backend.SagaTime(s.opts.Now())
	var (
		out   stores.SagaInstance
		stale *stores.StaleSagaError
	)
	err = s.inTx(ctx, fmt.Sprintf("saga %q: advance instance %q from version %d", inst.Saga, inst.ID, inst.Version), func(tx *sql.Tx) error {
		var err error
		if stale, err = advanceTx(ctx, tx, inst, steps, now); err != nil || stale != nil {
			return err
		}
		out, _, err = scanSaga(tx.QueryRowContext(ctx, `SELECT `+sagaColumns+` FROM acemq_sagas WHERE id = ?1`, inst.ID))
		return err
	})
	if err != nil {
		return stores.SagaInstance{}, err
	}
	if stale != nil {
		return stores.SagaInstance{}, stale
	}
	return out, nil
}

// advanceTx writes inst, its steps encoded, from its version in tx; stale
// is the refusal of a version the store does not hold.
func advanceTx(ctx context.Context, tx *sql.Tx, inst stores.SagaInstance, steps []byte, now time.Time) (*stores.StaleSagaError, error) {
	var ended sql.NullInt64
	if inst.State.Ended() {
		ended = sql.NullInt64{Int64: now.UnixMilli(), Valid: true}
	}
	res, err := tx.ExecContext(ctx, `UPDATE acemq_sagas SET state = ?1, step = ?2, reply_to = ?3, correlation_id = ?4, steps = ?5,
    version = version + 1, updated_at = ?6, ended_at = ?7
WHERE id = ?8 AND version = ?9 AND ended_at IS NULL`,
		string(inst.State), inst.Step, inst.ReplyTo, inst.CorrelationID, string(steps), now.UnixMilli(), ended, inst.ID, inst.Version)
	if err != nil {
		return nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, err
	}
	if n == 1 {
		return nil, nil
	}
	var current int64
	err = tx.QueryRowContext(ctx, `SELECT version FROM acemq_sagas WHERE id = ?1`, inst.ID).Scan(&current)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return backend.StaleSaga(inst, current), nil
}

// ListSagas implements stores.Sagas.
func (s *Store) ListSagas(ctx context.Context, f stores.SagaFilter) ([]stores.SagaInstance, error) {
	var (
		where []string
		args  []any
	)
	if f.Saga != "" {
		args = append(args, f.Saga)
		where = append(where, fmt.Sprintf("saga = ?%d", len(args)))
	}
	if f.State != "" {
		args = append(args, string(f.State))
		where = append(where, fmt.Sprintf("state = ?%d", len(args)))
	}
	q := `SELECT ` + sagaColumns + ` FROM acemq_sagas`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	if f.Newest {
		q += ` ORDER BY started_at DESC, id DESC`
	} else {
		q += ` ORDER BY started_at, id`
	}
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += fmt.Sprintf(" LIMIT ?%d", len(args))
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list saga instances: %w", err)
	}
	defer rows.Close()
	var out []stores.SagaInstance
	for rows.Next() {
		inst, _, err := scanSaga(rows)
		if err != nil {
			return nil, fmt.Errorf("list saga instances: %w", err)
		}
		out = append(out, inst)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list saga instances: %w", err)
	}
	return out, nil
}

// PurgeSagas implements stores.Sagas, backend.PurgeBatch rows a
// transaction.
func (s *Store) PurgeSagas(ctx context.Context, before time.Time) (int64, error) {
	return backend.PurgeInBatches(func(limit int, purged int64) (int64, error) {
		var n int64
		err := s.inTx(ctx, fmt.Sprintf("purge ended saga instances (%d purged before the failure)", purged), func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM acemq_sagas WHERE id IN (
    SELECT id FROM acemq_sagas WHERE ended_at IS NOT NULL AND ended_at < ?1 LIMIT ?2)`, before.UnixMilli(), limit)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		return n, err
	})
}

// CountSagas implements stores.Sagas: one GROUP BY, which the index on
// (saga, state, started_at) answers.
func (s *Store) CountSagas(ctx context.Context) ([]stores.SagaCount, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT saga, state, count(*) FROM acemq_sagas GROUP BY saga, state ORDER BY saga, state`)
	if err != nil {
		return nil, fmt.Errorf("count saga instances: %w", err)
	}
	defer rows.Close()
	var out []stores.SagaCount
	for rows.Next() {
		var (
			c     stores.SagaCount
			state string
		)
		if err := rows.Scan(&c.Saga, &state, &c.Instances); err != nil {
			return nil, fmt.Errorf("count saga instances: %w", err)
		}
		c.State = stores.SagaState(state)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count saga instances: %w", err)
	}
	return out, nil
}

type rowScanner interface{ Scan(dest ...any) error }

// scanSaga reads one row of sagaColumns; ok is false for no row.
func scanSaga(r rowScanner) (stores.SagaInstance, bool, error) {
	var (
		inst             stores.SagaInstance
		state, steps     string
		input            []byte
		started, updated int64
		ended            sql.NullInt64
	)
	err := r.Scan(&inst.ID, &inst.Saga, &state, &inst.Step, &input, &inst.ReplyTo, &inst.CorrelationID, &steps,
		&inst.Version, &started, &updated, &ended)
	if errors.Is(err, sql.ErrNoRows) {
		return stores.SagaInstance{}, false, nil
	}
	if err != nil {
		return stores.SagaInstance{}, false, err
	}
	inst.State = stores.SagaState(state)
	if len(input) > 0 {
		inst.Input = input
	}
	inst.StartedAt, inst.UpdatedAt = time.UnixMilli(started).UTC(), time.UnixMilli(updated).UTC()
	if ended.Valid {
		inst.EndedAt = time.UnixMilli(ended.Int64).UTC()
	}
	if inst.Steps, err = backend.DecodeSagaSteps(inst.ID, []byte(steps)); err != nil {
		return stores.SagaInstance{}, false, err
	}
	return inst, true, nil
}

// blob keeps an empty input a zero-length BLOB rather than NULL.
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
