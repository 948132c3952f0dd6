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

var _ stores.ScheduleTicks = (*Store)(nil)

// ClaimTick implements stores.ScheduleTicks: the tick's row and the outbox
// record in one IMMEDIATE transaction, so a second claimer waits for the
// write lock and then finds the row.
func (s *Store) ClaimTick(ctx context.Context, schedule string, tick time.Time, rec stores.OutboxRecord) (bool, error) {
	if err := backend.CheckTick(schedule, tick); err != nil {
		return false, err
	}
	var claimed bool
	err := s.inTx(ctx, fmt.Sprintf("schedule %q: claim tick %s", schedule, backend.TickText(tick)), func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `INSERT INTO acemq_schedule_ticks (schedule, tick, claimed_at) VALUES (?1, ?2, ?3)
ON CONFLICT DO NOTHING RETURNING 1`, schedule, tick.UnixMilli(), s.opts.Now().UnixMilli()).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		id, err := Outbox{}.Add(ctx, tx, rec)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE acemq_schedule_ticks SET outbox_id = ?1 WHERE schedule = ?2 AND tick = ?3`,
			id, schedule, tick.UnixMilli()); err != nil {
			return err
		}
		claimed = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return claimed, nil
}

// LastTick implements stores.ScheduleTicks.
func (s *Store) LastTick(ctx context.Context, schedule string) (time.Time, bool, error) {
	var last sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT max(tick) FROM acemq_schedule_ticks WHERE schedule = ?`, schedule).Scan(&last); err != nil {
		return time.Time{}, false, fmt.Errorf("schedule %q: read the last tick: %w", schedule, err)
	}
	if !last.Valid {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(last.Int64), true, nil
}

// PurgeTicks implements stores.ScheduleTicks, backend.PurgeBatch rows a
// transaction.
func (s *Store) PurgeTicks(ctx context.Context, before time.Time) (int64, error) {
	return backend.PurgeInBatches(func(limit int, purged int64) (int64, error) {
		var n int64
		err := s.inTx(ctx, fmt.Sprintf("purge schedule ticks (%d purged before the failure)", purged), func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM acemq_schedule_ticks WHERE rowid IN (
    SELECT t.rowid FROM acemq_schedule_ticks AS t
    WHERE t.tick < ?1 AND EXISTS (SELECT 1 FROM acemq_schedule_ticks AS l WHERE l.schedule = t.schedule AND l.tick > t.tick)
    LIMIT ?2)`, before.UnixMilli(), limit)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		return n, err
	})
}
