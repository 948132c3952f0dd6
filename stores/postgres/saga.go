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
func (s *Store) CreateSaga(ctx context.Context, inst stores.SagaInstance) (_ stores.SagaInstance, _ bool, err error) {
	defer unavailable(&err)
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
func (s *Store) GetSaga(ctx context.Context, id string) (_ stores.SagaInstance, _ bool, err error) {
	defer unavailable(&err)
	inst, ok, err := scanSaga(s.pool.QueryRow(ctx, `SELECT `+sagaColumns+` FROM acemq_sagas WHERE id = $1`, id))
	if err != nil {
		return stores.SagaInstance{}, false, fmt.Errorf("saga instance %q: read it: %w", id, err)
	}
	return inst, ok, nil
}

// AdvanceSaga implements stores.Sagas: one UPDATE … WHERE version = the
// presented one; when it updated nothing, the current version is read for
// the refusal.
func (s *Store) AdvanceSaga(ctx context.Context, inst stores.SagaInstance) (_ stores.SagaInstance, err error) {
	defer unavailable(&err)
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

// GetSagaBatch reads the instances ids name in one statement: out[i] is
// ids[i]'s instance, or the zero instance (ID "") when the store has none.
// The runtime's saga consumers read through it, their concurrent
// deliveries' reads coalesced into one round trip.
func (s *Store) GetSagaBatch(ctx context.Context, ids []string) (_ []stores.SagaInstance, err error) {
	defer unavailable(&err)
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sagaColumns+` FROM acemq_sagas WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read %d saga instances: %w", len(ids), err)
	}
	defer rows.Close()
	byID := make(map[string]stores.SagaInstance, len(ids))
	for rows.Next() {
		inst, _, err := scanSaga(rows)
		if err != nil {
			return nil, fmt.Errorf("read %d saga instances: %w", len(ids), err)
		}
		byID[inst.ID] = inst
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %d saga instances: %w", len(ids), err)
	}
	out := make([]stores.SagaInstance, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out, nil
}

// advanceSQL advances every instance of a batch whose version is the one
// presented, in one statement and one transaction. Each row is locked by
// its own primary-key lookup, walking the ids sorted, so that two batches
// advancing the same instances (a step and the saga's timeout) wait for
// each other instead of deadlocking, and updated by the address the lock
// returned, which no plan turns into a read of the whole table (as
// confirmSQL). A row another transaction advanced while this one waited
// for its lock no longer has the version presented, and is left alone.
const advanceSQL = `
WITH u AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::integer[], $5::text[], $6::text[], $7::jsonb[], $8::timestamptz[])
        AS u(id, version, state, step, reply_to, correlation_id, steps, ended_at)
), locked AS MATERIALIZED (
    SELECT l.tid, o.* FROM (SELECT * FROM u ORDER BY id) AS o
    CROSS JOIN LATERAL (
        SELECT a.ctid AS tid FROM acemq_sagas AS a
        WHERE a.id = o.id AND a.version = o.version AND a.ended_at IS NULL
        FOR UPDATE
    ) AS l
)
UPDATE acemq_sagas AS a SET state = l.state, step = l.step, reply_to = l.reply_to, correlation_id = l.correlation_id,
    steps = l.steps, version = a.version + 1, updated_at = $9, ended_at = l.ended_at
FROM locked AS l
WHERE a.ctid = ANY(ARRAY(SELECT tid FROM locked)) AND a.ctid = l.tid
RETURNING a.id`

// AdvanceSagaBatch advances the instances insts hold, each from the version
// it presents, as AdvanceSaga does one: refused[i] is nil when insts[i] was
// written, a *stores.StaleSagaError when its version is not the stored one
// (or the instance ended or is gone), or the reason it is not a valid
// instance. err is a failure of the store: nothing is known to be written.
// Two writes of one instance in a batch go in turn, the second seeing the
// first's version.
func (s *Store) AdvanceSagaBatch(ctx context.Context, insts []stores.SagaInstance) (_ []error, err error) {
	defer unavailable(&err)
	refused := make([]error, len(insts))
	todo := make([]int, 0, len(insts))
	for i, inst := range insts {
		if err := stores.CheckSagaInstance(inst); err != nil {
			refused[i] = err
			continue
		}
		todo = append(todo, i)
	}
	for len(todo) > 0 {
		// One write of each instance a statement.
		seen := make(map[string]bool, len(todo))
		var now, later []int
		for _, i := range todo {
			if seen[insts[i].ID] {
				later = append(later, i)
				continue
			}
			seen[insts[i].ID] = true
			now = append(now, i)
		}
		if err := s.advanceRound(ctx, insts, now, refused); err != nil {
			return nil, err
		}
		todo = later
	}
	return refused, nil
}

func (s *Store) advanceRound(ctx context.Context, insts []stores.SagaInstance, idx []int, refused []error) error {
	what := fmt.Sprintf("saga %q: advance instance %q from version %d", insts[idx[0]].Saga, insts[idx[0]].ID, insts[idx[0]].Version)
	if len(idx) > 1 {
		what = fmt.Sprintf("advance a batch of %d saga instances", len(idx))
	}
	n := len(idx)
	ids, states, replyTo, corr, steps := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	versions, step := make([]int64, n), make([]int32, n)
	ended := make([]*time.Time, n)
	now := backend.SagaTime(s.opts.Now())
	for j, i := range idx {
		inst := insts[i]
		b, err := backend.EncodeSagaSteps(inst)
		if err != nil {
			return err
		}
		ids[j], versions[j], states[j], step[j], replyTo[j], corr[j], steps[j] = inst.ID, inst.Version, string(inst.State), int32(inst.Step), inst.ReplyTo, inst.CorrelationID, string(b)
		if inst.State.Ended() {
			ended[j] = &now
		}
	}
	rows, err := s.pool.Query(ctx, advanceSQL, planEachRun, ids, versions, states, step, replyTo, corr, steps, ended, now)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	written, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	done := make(map[string]bool, len(written))
	for _, id := range written {
		done[id] = true
	}
	var stale []string
	for _, i := range idx {
		if !done[insts[i].ID] {
			stale = append(stale, insts[i].ID)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	// The current versions, for the refusals: no row is version 0.
	rows, err = s.pool.Query(ctx, `SELECT id, version FROM acemq_sagas WHERE id = ANY($1)`, stale)
	if err != nil {
		return fmt.Errorf("%s: read the current versions: %w", what, err)
	}
	current := map[string]int64{}
	for rows.Next() {
		var id string
		var v int64
		if err := rows.Scan(&id, &v); err != nil {
			rows.Close()
			return fmt.Errorf("%s: read the current versions: %w", what, err)
		}
		current[id] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: read the current versions: %w", what, err)
	}
	for _, i := range idx {
		if !done[insts[i].ID] {
			refused[i] = backend.StaleSaga(insts[i], current[insts[i].ID])
		}
	}
	return nil
}

// CreateSagaBatch creates the instances insts hold in one statement, as
// CreateSaga does one: created[i] is whether insts[i] was created, and
// out[i] the instance as stored (the one another creator wrote first when
// it was not). Every instance must pass stores.CheckSagaInstance. Of two
// creates of one id in a batch, the first creates.
func (s *Store) CreateSagaBatch(ctx context.Context, insts []stores.SagaInstance) (_ []stores.SagaInstance, _ []bool, err error) {
	defer unavailable(&err)
	if len(insts) == 0 {
		return nil, nil, nil
	}
	what := fmt.Sprintf("saga %q: create instance %q", insts[0].Saga, insts[0].ID)
	if len(insts) > 1 {
		what = fmt.Sprintf("create a batch of %d saga instances", len(insts))
	}
	n := len(insts)
	ids, sagas, states, replyTo, corr, steps := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	step, inputs, ended := make([]int32, n), make([][]byte, n), make([]*time.Time, n)
	now := backend.SagaTime(s.opts.Now())
	for i, inst := range insts {
		if err := stores.CheckSagaInstance(inst); err != nil {
			return nil, nil, err
		}
		b, err := backend.EncodeSagaSteps(inst)
		if err != nil {
			return nil, nil, err
		}
		ids[i], sagas[i], states[i], step[i], inputs[i], replyTo[i], corr[i], steps[i] = inst.ID, inst.Saga, string(inst.State), int32(inst.Step), blob(inst.Input), inst.ReplyTo, inst.CorrelationID, string(b)
		if inst.State.Ended() {
			ended[i] = &now
		}
	}
	rows, err := s.pool.Query(ctx, `INSERT INTO acemq_sagas (`+sagaColumns+`)
SELECT id, saga, state, step, input, reply_to, correlation_id, steps, 1, $9, $9, ended_at
FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::bytea[], $6::text[], $7::text[], $8::jsonb[], $10::timestamptz[])
    AS u(id, saga, state, step, input, reply_to, correlation_id, steps, ended_at)
ORDER BY id
ON CONFLICT (id) DO NOTHING RETURNING `+sagaColumns, ids, sagas, states, step, inputs, replyTo, corr, steps, now, ended)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	made := map[string]stores.SagaInstance{}
	for rows.Next() {
		inst, _, err := scanSaga(rows)
		if err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("%s: %w", what, err)
		}
		made[inst.ID] = inst
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	out, created := make([]stores.SagaInstance, n), make([]bool, n)
	var others []string
	for i, id := range ids {
		if inst, ok := made[id]; ok {
			out[i], created[i] = inst, true
			delete(made, id) // a second create of the id in the batch did not create
			continue
		}
		others = append(others, id)
	}
	if len(others) == 0 {
		return out, created, nil
	}
	found, err := s.GetSagaBatch(ctx, others)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	j := 0
	for i := range ids {
		if created[i] {
			continue
		}
		if found[j].ID == "" {
			return nil, nil, fmt.Errorf("saga %q: create instance %q: it existed, then was gone before it could be read (purged at once?); try again", insts[i].Saga, insts[i].ID)
		}
		out[i] = found[j]
		j++
	}
	return out, created, nil
}
