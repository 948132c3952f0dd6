package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

var _ stores.ScheduleTicks = (*Store)(nil)

// ClaimTick implements stores.ScheduleTicks: the tick's row and the outbox
// record in one transaction. A concurrent claimer's INSERT waits on the
// row's key until this transaction ends, then does nothing if it committed.
func (s *Store) ClaimTick(ctx context.Context, schedule string, tick time.Time, rec stores.OutboxRecord) (_ bool, err error) {
	defer unavailable(&err)
	if err := backend.CheckTick(schedule, tick); err != nil {
		return false, err
	}
	at := tick.Truncate(time.Millisecond)
	var claimed bool
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `INSERT INTO acemq_schedule_ticks (schedule, tick, claimed_at) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING RETURNING 1`, schedule, at, s.opts.Now()).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		id, err := Outbox{}.Add(ctx, tx, rec)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE acemq_schedule_ticks SET outbox_id = $1 WHERE schedule = $2 AND tick = $3`, id, schedule, at); err != nil {
			return err
		}
		claimed = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("schedule %q: claim tick %s: %w", schedule, backend.TickText(tick), err)
	}
	return claimed, nil
}

// LastTick implements stores.ScheduleTicks.
func (s *Store) LastTick(ctx context.Context, schedule string) (time.Time, bool, error) {
	var last *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT max(tick) FROM acemq_schedule_ticks WHERE schedule = $1`, schedule).Scan(&last); err != nil {
		return time.Time{}, false, fmt.Errorf("schedule %q: read the last tick: %w", schedule, err)
	}
	if last == nil {
		return time.Time{}, false, nil
	}
	return *last, true, nil
}

// PurgeTicks implements stores.ScheduleTicks, backend.PurgeBatch rows a
// statement.
func (s *Store) PurgeTicks(ctx context.Context, before time.Time) (int64, error) {
	return backend.PurgeInBatches(func(limit int, purged int64) (int64, error) {
		tag, err := s.pool.Exec(ctx, `DELETE FROM acemq_schedule_ticks WHERE ctid IN (
    SELECT t.ctid FROM acemq_schedule_ticks AS t
    WHERE t.tick < $1 AND EXISTS (SELECT 1 FROM acemq_schedule_ticks AS l WHERE l.schedule = t.schedule AND l.tick > t.tick)
    LIMIT $2)`, before, limit)
		if err != nil {
			return 0, fmt.Errorf("purge schedule ticks (%d purged before the failure): %w", purged, err)
		}
		return tag.RowsAffected(), nil
	})
}
