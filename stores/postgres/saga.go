package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

var _ stores.Sagas = (*Store)(nil)

const sagaColumns = `id, saga, state, step, input, reply_to, correlation_id, steps, version, started_at, updated_at, ended_at`

// CreateSaga implements stores.Sagas: one INSERT … ON CONFLICT DO NOTHING.
// A concurrent creator's insert waits on the id until this one's
// transaction ends, then does nothing and reads the winner's row.
func (s *Store) CreateSaga(ctx context.Context, inst stores.SagaInstance) (stores.SagaInstance, bool, error) {
	if err := stores.CheckSagaInstance(inst); err != nil {
		return stores.SagaInstance{}, false, err
	}
	steps, err := backend.EncodeSagaSteps(inst)
	if err != nil {
		return stores.SagaInstance{}, false, err
	}
	now := backend.SagaTime(s.opts.Now())
	var ended *time.Time
	if inst.State.Ended() {
		ended = &now
	}
	out, ok, err := scanSaga(s.pool.QueryRow(ctx, `INSERT INTO acemq_sagas (`+sagaColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, $9, $9, $10) ON CONFLICT (id) DO NOTHING RETURNING `+sagaColumns,
		inst.ID, inst.Saga, string(inst.State), inst.Step, blob(inst.Input), inst.ReplyTo, inst.CorrelationID, string(steps), now, ended))
	if err != nil {
		return stores.SagaInstance{}, false, fmt.Errorf("saga %q: create instance %q: %w", inst.Saga, inst.ID, err)
	}
	if ok {
		return out, true, nil
	}
	out, ok, err = s.GetSaga(ctx, inst.ID)
	if err != nil {
		return stores.SagaInstance{}, false, err
	}
	if !ok {
		return stores.SagaInstance{}, false, fmt.Errorf("saga %q: create instance %q: it existed, then was gone before it could be read (purged at once?); try again", inst.Saga, inst.ID)
	}
	return out, false, nil
}

// GetSaga implements stores.Sagas.
func (s *Store) GetSaga(ctx context.Context, id string) (stores.SagaInstance, bool, error) {
	inst, ok, err := scanSaga(s.pool.QueryRow(ctx, `SELECT `+sagaColumns+` FROM acemq_sagas WHERE id = $1`, id))
	if err != nil {
		return stores.SagaInstance{}, false, fmt.Errorf("saga instance %q: read it: %w", id, err)
	}
	return inst, ok, nil
}

// AdvanceSaga implements stores.Sagas: one UPDATE … WHERE version = the
// presented one; when it updated nothing, the current version is read for
// the refusal.
func (s *Store) AdvanceSaga(ctx context.Context, inst stores.SagaInstance) (stores.SagaInstance, error) {
	if err := stores.CheckSagaInstance(inst); err != nil {
		return stores.SagaInstance{}, err
	}
	steps, err := backend.EncodeSagaSteps(inst)
	if err != nil {
		return stores.SagaInstance{}, err
	}
	now := backend.SagaTime(s.opts.Now())
	var ended *time.Time
	if inst.State.Ended() {
		ended = &now
	}
	out, ok, err := scanSaga(s.pool.QueryRow(ctx, `UPDATE acemq_sagas SET state = $1, step = $2, reply_to = $3, correlation_id = $4, steps = $5,
    version = version + 1, updated_at = $6, ended_at = $7
WHERE id = $8 AND version = $9 AND ended_at IS NULL RETURNING `+sagaColumns,
		string(inst.State), inst.Step, inst.ReplyTo, inst.CorrelationID, string(steps), now, ended, inst.ID, inst.Version))
	if err != nil {
		return stores.SagaInstance{}, fmt.Errorf("saga %q: advance instance %q from version %d: %w", inst.Saga, inst.ID, inst.Version, err)
	}
	if ok {
		return out, nil
	}
	var current int64
	err = s.pool.QueryRow(ctx, `SELECT version FROM acemq_sagas WHERE id = $1`, inst.ID).Scan(&current)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return stores.SagaInstance{}, fmt.Errorf("saga %q: advance instance %q from version %d: read the current version: %w", inst.Saga, inst.ID, inst.Version, err)
	}
	return stores.SagaInstance{}, backend.StaleSaga(inst, current)
}

// ListSagas implements stores.Sagas.
func (s *Store) ListSagas(ctx context.Context, f stores.SagaFilter) ([]stores.SagaInstance, error) {
	var (
		where []string
		args  []any
	)
	if f.Saga != "" {
		args = append(args, f.Saga)
		where = append(where, fmt.Sprintf("saga = $%d", len(args)))
	}
	if f.State != "" {
		args = append(args, string(f.State))
		where = append(where, fmt.Sprintf("state = $%d", len(args)))
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
		q += fmt.Sprintf(" LIMIT $%d", len(args))
	}
	rows, err := s.pool.Query(ctx, q, args...)
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

// PurgeSagas implements stores.Sagas, backend.PurgeBatch rows a statement.
func (s *Store) PurgeSagas(ctx context.Context, before time.Time) (int64, error) {
	return backend.PurgeInBatches(func(limit int, purged int64) (int64, error) {
		tag, err := s.pool.Exec(ctx, `DELETE FROM acemq_sagas WHERE id IN (
    SELECT id FROM acemq_sagas WHERE ended_at IS NOT NULL AND ended_at < $1 LIMIT $2)`, before, limit)
		if err != nil {
			return 0, fmt.Errorf("purge ended saga instances (%d purged before the failure): %w", purged, err)
		}
		return tag.RowsAffected(), nil
	})
}

// CountSagas implements stores.Sagas: one GROUP BY, which the index on
// (saga, state, started_at) answers.
func (s *Store) CountSagas(ctx context.Context) ([]stores.SagaCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT saga, state, count(*) FROM acemq_sagas GROUP BY saga, state ORDER BY saga, state`)
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

// scanSaga reads one row of sagaColumns; ok is false for no row.
func scanSaga(r pgx.Row) (stores.SagaInstance, bool, error) {
	var (
		inst             stores.SagaInstance
		state, steps     string
		input            []byte
		started, updated time.Time
		ended            *time.Time
	)
	err := r.Scan(&inst.ID, &inst.Saga, &state, &inst.Step, &input, &inst.ReplyTo, &inst.CorrelationID, &steps,
		&inst.Version, &started, &updated, &ended)
	if errors.Is(err, pgx.ErrNoRows) {
		return stores.SagaInstance{}, false, nil
	}
	if err != nil {
		return stores.SagaInstance{}, false, err
	}
	inst.State = stores.SagaState(state)
	if len(input) > 0 {
		inst.Input = input
	}
	inst.StartedAt, inst.UpdatedAt = started.UTC(), updated.UTC()
	if ended != nil {
		inst.EndedAt = ended.UTC()
	}
	if inst.Steps, err = backend.DecodeSagaSteps(inst.ID, []byte(steps)); err != nil {
		return stores.SagaInstance{}, false, err
	}
	return inst, true, nil
}

// blob keeps an empty input a zero-length bytea rather than NULL.
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
