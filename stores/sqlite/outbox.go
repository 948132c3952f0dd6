package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

// Outbox is the SQLite outbox write side (stores.Outbox[*sql.Tx]). The zero
// value is ready to use; it needs no connection of its own.
type Outbox struct{}

var _ stores.Outbox[*sql.Tx] = Outbox{}

// Outbox returns the write side.
func (s *Store) Outbox() Outbox { return Outbox{} }

// Add implements stores.Outbox: it inserts rec in tx, which must be a
// transaction on the store's SQLite file (begun on Store.DB, or on a handle
// opened with DSN). The record is published only if tx commits.
func (Outbox) Add(ctx context.Context, tx *sql.Tx, rec stores.OutboxRecord) (int64, error) {
	if tx == nil {
		return 0, errors.New("outbox add: nil transaction")
	}
	if err := backend.CheckRecord(rec); err != nil {
		return 0, err
	}
	props, err := backend.EncodeProperties(rec.Properties)
	if err != nil {
		return 0, err
	}
	body := rec.Body
	if body == nil {
		body = []byte{}
	}
	tp := rec.TraceParent
	if tp == "" {
		tp = stores.TraceParentOf(ctx)
	}
	var id int64
	err = tx.QueryRowContext(ctx, `
INSERT INTO acemq_outbox (exchange, routing_key, body, content_type, properties, deliver_at, traceparent)
VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`, rec.Exchange, rec.RoutingKey, body, rec.ContentType, string(props),
		msOrNull(backend.DeliverAt(rec.DeliverAt)), sql.NullString{String: tp, Valid: tp != ""}).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("outbox add for exchange %q routing key %q: %w", rec.Exchange, rec.RoutingKey, err)
	}
	return id, nil
}

const recordCols = `id, exchange, routing_key, body, content_type, properties, created_at,
    attempts, last_error, lease_owner, lease_until, published_at, stuck_at, deliver_at, traceparent`

type scanner interface{ Scan(...any) error }

func scanRecord(sc scanner) (stores.OutboxRecord, error) {
	var r stores.OutboxRecord
	var props string
	var created int64
	var lastErr, owner, traceparent sql.NullString
	var until, published, stuck, deliverAt sql.NullInt64
	if err := sc.Scan(&r.ID, &r.Exchange, &r.RoutingKey, &r.Body, &r.ContentType, &props, &created,
		&r.Attempts, &lastErr, &owner, &until, &published, &stuck, &deliverAt, &traceparent); err != nil {
		return r, err
	}
	if r.Body == nil {
		r.Body = []byte{}
	}
	p, err := backend.DecodeProperties([]byte(props))
	if err != nil {
		// One unreadable row must not fail the batch claimed with it.
		r.Invalid = fmt.Errorf("outbox row %d: %w", r.ID, err)
	}
	r.Properties = p
	r.CreatedAt = time.UnixMilli(created)
	r.LastError, r.LeaseOwner = lastErr.String, owner.String
	r.LeaseUntil, r.PublishedAt, r.StuckAt = msTime(until), msTime(published), msTime(stuck)
	r.DeliverAt, r.TraceParent = msTime(deliverAt), traceparent.String
	return r, nil
}

// msOrNull is t as a nullable column of unix milliseconds: NULL for the
// zero time.
func msOrNull(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

func msTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64)
}

func collect(rows *sql.Rows, err error) ([]stores.OutboxRecord, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []stores.OutboxRecord
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b stores.OutboxRecord) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// The relay's statements name the partial index they walk. Statistics
// gathered while a backlog was pending (ANALYZE, PRAGMA optimize) make the
// planner prefer a scan of the whole table, published rows included, and a
// claim holds the write lock for as long as its scan takes. With INDEXED BY
// the planner has no such choice: a statement walks its index, or fails to
// prepare if its WHERE clause stops implying the index's predicate in
// migrations/0002_outbox.sql. plan_test.go checks the plans.
const (
	outboxClaimSQL = `
UPDATE acemq_outbox SET lease_owner = ?1, lease_until = ?2
WHERE id IN (
    SELECT id FROM acemq_outbox INDEXED BY acemq_outbox_pending
    WHERE published_at IS NULL AND stuck_at IS NULL AND (lease_until IS NULL OR lease_until <= ?3)
    ORDER BY id LIMIT ?4)
RETURNING ` + recordCols

	outboxPendingSQL = `SELECT ` + recordCols + ` FROM acemq_outbox INDEXED BY acemq_outbox_pending
WHERE published_at IS NULL AND stuck_at IS NULL ORDER BY id LIMIT ?`

	outboxStuckSQL = `SELECT ` + recordCols + ` FROM acemq_outbox INDEXED BY acemq_outbox_stuck
WHERE stuck_at IS NOT NULL AND published_at IS NULL ORDER BY id LIMIT ?`
)

// ClaimBatch implements stores.OutboxRelay. SQLite has one writer at a time,
// so the UPDATE alone keeps two relays off the same rows.
func (s *Store) ClaimBatch(ctx context.Context, owner string, n int, lease time.Duration) ([]stores.OutboxRecord, error) {
	if err := backend.CheckClaim(owner, n, lease); err != nil {
		return nil, err
	}
	var out []stores.OutboxRecord
	err := s.inTx(ctx, fmt.Sprintf("outbox relay %q: claim batch", owner), func(tx *sql.Tx) error {
		// The clock is read once the write lock is held: a claim that
		// waited for the lock still gets its whole lease, and does not
		// hand out rows already expired to the next relay.
		now := s.opts.Now()
		var err error
		out, err = collect(tx.QueryContext(ctx, outboxClaimSQL, owner, now.Add(lease).UnixMilli(), now.UnixMilli(), n))
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MarkPublished implements stores.OutboxRelay.
func (s *Store) MarkPublished(ctx context.Context, ids []int64, owner string) error {
	if len(ids) == 0 {
		return nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	var lost []int64
	err = s.inTx(ctx, fmt.Sprintf("outbox relay %q: mark published", owner), func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
UPDATE acemq_outbox SET published_at = ?1, lease_owner = NULL, lease_until = NULL
WHERE id IN (SELECT value FROM json_each(?2)) AND lease_owner = ?3
    AND published_at IS NULL AND stuck_at IS NULL`, s.opts.Now().UnixMilli(), string(list), owner); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `
SELECT j.value FROM json_each(?1) AS j
WHERE NOT EXISTS (SELECT 1 FROM acemq_outbox o WHERE o.id = j.value AND o.published_at IS NOT NULL)`, string(list))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			lost = append(lost, id)
		}
		return rows.Err()
	})
	if err != nil {
		return err
	}
	if lost != nil {
		return &stores.LeaseLostError{Owner: owner, IDs: lost}
	}
	return nil
}

// MarkFailed implements stores.OutboxRelay.
func (s *Store) MarkFailed(ctx context.Context, id int64, owner, reason string) (bool, error) {
	var stuck, lost bool
	err := s.inTx(ctx, fmt.Sprintf("outbox relay %q: mark row %d failed", owner, id), func(tx *sql.Tx) error {
		// The clock is read under the write lock, as in ClaimBatch, so that
		// the retry delay starts when the row is marked, not before the wait.
		now := s.opts.Now()
		err := tx.QueryRowContext(ctx, `
UPDATE acemq_outbox SET
    attempts = attempts + 1,
    last_error = ?1,
    lease_owner = NULL,
    lease_until = CASE WHEN attempts + 1 >= ?2 THEN NULL ELSE ?3 END,
    stuck_at = CASE WHEN attempts + 1 >= ?2 THEN ?4 ELSE NULL END
WHERE id = ?5 AND lease_owner = ?6 AND published_at IS NULL AND stuck_at IS NULL
RETURNING stuck_at IS NOT NULL`, reason, s.opts.OutboxMaxAttempts, now.Add(s.opts.OutboxRetryDelay).UnixMilli(),
			now.UnixMilli(), id, owner).Scan(&stuck)
		if errors.Is(err, sql.ErrNoRows) {
			lost = true
			return nil
		}
		return err
	})
	if err != nil {
		return false, err
	}
	if lost {
		return false, &stores.LeaseLostError{Owner: owner, IDs: []int64{id}}
	}
	return stuck, nil
}

// ListPending implements stores.OutboxRelay.
func (s *Store) ListPending(ctx context.Context, limit int) ([]stores.OutboxRecord, error) {
	out, err := collect(s.db.QueryContext(ctx, outboxPendingSQL, sqlLimit(limit)))
	if err != nil {
		return nil, fmt.Errorf("list pending outbox rows: %w", err)
	}
	return out, nil
}

// ListStuck implements stores.OutboxRelay.
func (s *Store) ListStuck(ctx context.Context, limit int) ([]stores.OutboxRecord, error) {
	out, err := collect(s.db.QueryContext(ctx, outboxStuckSQL, sqlLimit(limit)))
	if err != nil {
		return nil, fmt.Errorf("list stuck outbox rows: %w", err)
	}
	return out, nil
}

func sqlLimit(limit int) int {
	if limit <= 0 {
		return -1
	}
	return limit
}

// PurgePublished implements stores.OutboxRelay.
//
// As on PostgreSQL, no index covers published_at: the purge walks the table
// in id order, backend.PurgeBatch rows a transaction (so the write lock is held
// briefly, batch after batch), and stops at the first row written at or
// after before, as no row written later can have been published before it.
func (s *Store) PurgePublished(ctx context.Context, before time.Time) (int64, error) {
	cut := before.UnixMilli()
	return backend.PurgeWalk(func(after int64, limit int, purged int64) (n, last int64, done bool, err error) {
		// last stays 0 when the walk read no row: ids after 0 are positive.
		err = s.inTx(ctx, fmt.Sprintf("purge published outbox rows (%d purged before the failure)", purged), func(tx *sql.Tx) error {
			var lastID sql.NullInt64
			var newer sql.NullBool
			if err := tx.QueryRowContext(ctx, `SELECT max(id), max(created_at >= ?2) FROM (
    SELECT id, created_at FROM acemq_outbox WHERE id > ?1 ORDER BY id LIMIT ?3)`, after, cut, limit).Scan(&lastID, &newer); err != nil {
				return err
			}
			if !lastID.Valid {
				return nil
			}
			last, done = lastID.Int64, newer.Bool
			res, err := tx.ExecContext(ctx, `DELETE FROM acemq_outbox
WHERE id > ?1 AND id <= ?2 AND published_at IS NOT NULL AND published_at < ?3`, after, last, cut)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		return n, last, done, err
	})
}
