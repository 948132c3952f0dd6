package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

// Outbox is the PostgreSQL outbox write side (stores.Outbox[pgx.Tx]). The
// zero value is ready to use; it needs no connection of its own.
type Outbox struct{}

var _ stores.Outbox[pgx.Tx] = Outbox{}

// Outbox returns the write side.
func (s *Store) Outbox() Outbox { return Outbox{} }

// Add implements stores.Outbox: it inserts rec in tx, the caller's
// transaction (begun on any pool or connection whose search_path reaches the
// store's tables). The record is published only if tx commits.
func (Outbox) Add(ctx context.Context, tx pgx.Tx, rec stores.OutboxRecord) (int64, error) {
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
	err = tx.QueryRow(ctx, `
INSERT INTO acemq_outbox (exchange, routing_key, body, content_type, properties, deliver_at, traceparent)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7) RETURNING id`, rec.Exchange, rec.RoutingKey, body, rec.ContentType, string(props),
		timeOrNull(backend.DeliverAt(rec.DeliverAt)), textOrNull(tp)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("outbox add for exchange %q routing key %q: %w", rec.Exchange, rec.RoutingKey, err)
	}
	return id, nil
}

const recordCols = `o.id, o.exchange, o.routing_key, o.body, o.content_type, o.properties::text, o.created_at,
    o.attempts, o.last_error, o.lease_owner, o.lease_until, o.published_at, o.stuck_at, o.deliver_at, o.traceparent`

func scanRecord(row pgx.CollectableRow) (stores.OutboxRecord, error) {
	var r stores.OutboxRecord
	var props string
	var attempts int32
	var lastErr, owner, traceparent *string
	var until, published, stuck, deliverAt *time.Time
	if err := row.Scan(&r.ID, &r.Exchange, &r.RoutingKey, &r.Body, &r.ContentType, &props, &r.CreatedAt,
		&attempts, &lastErr, &owner, &until, &published, &stuck, &deliverAt, &traceparent); err != nil {
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
	r.Properties, r.Attempts = p, int(attempts)
	r.LastError, r.LeaseOwner = deref(lastErr), deref(owner)
	r.LeaseUntil, r.PublishedAt, r.StuckAt = derefTime(until), derefTime(published), derefTime(stuck)
	r.DeliverAt, r.TraceParent = derefTime(deliverAt), deref(traceparent)
	return r, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// textOrNull is s as a nullable column: NULL for "".
func textOrNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// timeOrNull is t as a nullable column: NULL for the zero time.
func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// idOrder makes the statements after it in its transaction (or pipelined
// batch) read outbox rows through an index in id order, as a queue must:
// at most LIMIT rows from the head of the pending (or stuck) index. Left to
// itself, the planner does that only while the table's statistics are
// right. On a table not analyzed yet, or analyzed while it was nearly empty
// and filled since (a new store, a burst after a quiet spell), it expects a
// handful of pending rows and plans a bitmap scan of all of them and a sort,
// so every claim reads and sorts the whole backlog: 40 ms a claim at 20,000
// rows, more the longer the backlog. The settings are local to the
// transaction.
const idOrder = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
    set_config('enable_sort', 'off', true)`

// collectInIDOrder runs sql, which returns recordCols, after idOrder in one
// round trip, and returns its rows sorted by id.
func (s *Store) collectInIDOrder(ctx context.Context, sql string, args ...any) ([]stores.OutboxRecord, error) {
	var out []stores.OutboxRecord
	q := &pgx.Batch{}
	q.Queue(idOrder)
	q.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, scanRecord)
		return err
	})
	if err := s.pool.SendBatch(ctx, q).Close(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b stores.OutboxRecord) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// ClaimBatch implements stores.OutboxRelay with FOR UPDATE SKIP LOCKED: a
// row another relay is leasing right now is skipped, not waited for, and a
// row whose lease a concurrent relay just committed fails the lease test
// when PostgreSQL re-checks it.
func (s *Store) ClaimBatch(ctx context.Context, owner string, n int, lease time.Duration) (_ []stores.OutboxRecord, err error) {
	defer unavailable(&err)
	if err := backend.CheckClaim(owner, n, lease); err != nil {
		return nil, err
	}
	now := s.opts.Now()
	out, err := s.collectInIDOrder(ctx, leaseClaimSQL, now, n, owner, now.Add(lease))
	if err != nil {
		return nil, fmt.Errorf("outbox relay %q: claim batch: %w", owner, err)
	}
	return out, nil
}

// leaseClaimSQL leases the claimable rows to $3 until $4.
var leaseClaimSQL = `
WITH c AS (` + claimableRows("o.id", "") + `)
UPDATE acemq_outbox AS o SET lease_owner = $3, lease_until = $4
FROM c WHERE o.id = c.id
RETURNING ` + recordCols

// claimableRows selects cols of the rows a claim may take, oldest first:
// neither published nor stuck, not leased (or the lease ended at $1, now),
// and not held by another relay, which is skipped, not waited for; at most
// $2. extra, when set, is one more condition ended by "AND ".
func claimableRows(cols, extra string) string {
	return `
SELECT ` + cols + ` FROM acemq_outbox AS o
WHERE ` + extra + `published_at IS NULL AND stuck_at IS NULL AND (lease_until IS NULL OR lease_until <= $1)
ORDER BY id LIMIT $2
FOR UPDATE SKIP LOCKED`
}

// failedSet is what a failed publish does to its row o: an attempt counted,
// the lease released until $3 (the retry delay's end), or, at $2 attempts,
// stuck since $4 (now).
const failedSet = `
    attempts = o.attempts + 1,
    lease_owner = NULL,
    lease_until = CASE WHEN o.attempts + 1 >= $2 THEN NULL ELSE $3::timestamptz END,
    stuck_at = CASE WHEN o.attempts + 1 >= $2 THEN $4::timestamptz ELSE NULL END`

// MarkPublished implements stores.OutboxRelay in one statement.
func (s *Store) MarkPublished(ctx context.Context, ids []int64, owner string) (err error) {
	defer unavailable(&err)
	if len(ids) == 0 {
		return nil
	}
	rows, err := s.pool.Query(ctx, `
WITH m AS (
    UPDATE acemq_outbox SET published_at = $2, lease_owner = NULL, lease_until = NULL
    WHERE id = ANY($1) AND lease_owner = $3 AND published_at IS NULL AND stuck_at IS NULL
    RETURNING id
)
SELECT x.id FROM unnest($1::bigint[]) AS x(id)
WHERE x.id NOT IN (SELECT id FROM m)
  AND NOT EXISTS (SELECT 1 FROM acemq_outbox o WHERE o.id = x.id AND o.published_at IS NOT NULL)`, ids, s.opts.Now(), owner)
	if err != nil {
		return fmt.Errorf("outbox relay %q: mark published: %w", owner, err)
	}
	lost, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("outbox relay %q: mark published: %w", owner, err)
	}
	if len(lost) > 0 {
		return &stores.LeaseLostError{Owner: owner, IDs: lost}
	}
	return nil
}

// MarkFailed implements stores.OutboxRelay.
func (s *Store) MarkFailed(ctx context.Context, id int64, owner, reason string) (_ bool, err error) {
	defer unavailable(&err)
	now := s.opts.Now()
	var stuck bool
	err = s.pool.QueryRow(ctx, `
UPDATE acemq_outbox AS o SET last_error = $1,`+failedSet+`
WHERE id = $5 AND lease_owner = $6 AND published_at IS NULL AND stuck_at IS NULL
RETURNING stuck_at IS NOT NULL`, reason, s.opts.OutboxMaxAttempts, now.Add(s.opts.OutboxRetryDelay), now, id, owner).Scan(&stuck)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, &stores.LeaseLostError{Owner: owner, IDs: []int64{id}}
	}
	if err != nil {
		return false, fmt.Errorf("outbox relay %q: mark row %d failed: %w", owner, id, err)
	}
	return stuck, nil
}

// ListPending implements stores.OutboxRelay.
func (s *Store) ListPending(ctx context.Context, limit int) ([]stores.OutboxRecord, error) {
	out, err := s.collectInIDOrder(ctx, listPendingSQL, sqlLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("list pending outbox rows: %w", err)
	}
	return out, nil
}

// ListStuck implements stores.OutboxRelay.
func (s *Store) ListStuck(ctx context.Context, limit int) ([]stores.OutboxRecord, error) {
	out, err := s.collectInIDOrder(ctx, listStuckSQL, sqlLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("list stuck outbox rows: %w", err)
	}
	return out, nil
}

// The rows `outbox list` shows, oldest first, at most $1.
const (
	listPendingSQL = `SELECT ` + recordCols + ` FROM acemq_outbox AS o
WHERE o.published_at IS NULL AND o.stuck_at IS NULL ORDER BY o.id LIMIT $1`
	listStuckSQL = `SELECT ` + recordCols + ` FROM acemq_outbox AS o
WHERE o.stuck_at IS NOT NULL AND o.published_at IS NULL ORDER BY o.id LIMIT $1`
)

// sqlLimit turns "no limit" into NULL, which LIMIT reads as ALL.
func sqlLimit(limit int) *int64 {
	if limit <= 0 {
		return nil
	}
	l := int64(limit)
	return &l
}

// PurgePublished implements stores.OutboxRelay.
//
// No index covers published_at (one would cost every published row an
// index entry): the purge walks the table in id order instead, backend.PurgeBatch
// rows a statement, and stops at the first row written at or after before,
// as no row written later can have been published before it. So a purge
// reads the rows old enough to go, and the few after them, not the whole
// table. (A row that got its id after a row written later, by a long
// transaction, or one written by a database whose clock runs ahead of the
// relay's, may wait for a later purge.)
func (s *Store) PurgePublished(ctx context.Context, before time.Time) (int64, error) {
	return backend.PurgeWalk(func(after int64, limit int, purged int64) (n, last int64, done bool, err error) {
		q := &pgx.Batch{}
		q.Queue(idOrder)
		q.Queue(purgePublishedSQL, after, before, limit).QueryRow(func(r pgx.Row) error { return r.Scan(&n, &last, &done) })
		if err := s.pool.SendBatch(ctx, q).Close(); err != nil {
			return 0, 0, false, fmt.Errorf("purge published outbox rows (%d purged before the failure): %w", purged, err)
		}
		return n, last, done, nil
	})
}

// purgePublishedSQL deletes, of the $3 rows after id $1, those published
// before $2, and returns how many it deleted, the last id it read (0 when
// none) and whether it read a row written at or after $2.
const purgePublishedSQL = `
WITH batch AS MATERIALIZED (
    SELECT id, created_at, published_at FROM acemq_outbox WHERE id > $1 ORDER BY id LIMIT $3
), gone AS (
    DELETE FROM acemq_outbox AS o USING batch AS b
    WHERE o.id = b.id AND b.published_at < $2
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), coalesce((SELECT max(id) FROM batch), 0),
    coalesce((SELECT bool_or(created_at >= $2) FROM batch), false)`
