package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

// idleInTransactionTimeout is PostgreSQL's error code for a session it ended
// because its transaction stayed idle too long.
const idleInTransactionTimeout = "25P03"

// ClaimLocked implements stores.OutboxLocker. The transaction begins, bounds
// its own idle time by lease and selects the batch in one round trip, on a
// connection the batch keeps until Finish or Abort, from the store's pool
// for held batches (at most heldConns).
func (s *Store) ClaimLocked(ctx context.Context, owner string, n int, lease time.Duration) (_ stores.LockedBatch, err error) {
	defer unavailable(&err)
	if err := backend.CheckClaim(owner, n, lease); err != nil {
		return nil, err
	}
	conn, err := s.held.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox relay %q: claim batch: %w", owner, err)
	}
	b := &lockedBatch{s: s, conn: conn, owner: owner, lease: lease}
	after, top := s.heldIDs.after(time.Now())
	q := &pgx.Batch{}
	q.Queue("BEGIN")
	// The setting is a 32-bit count of milliseconds (24.8 days): a longer
	// lease is bounded there, or every claim would fail.
	idle := min(max(lease.Milliseconds(), 1), math.MaxInt32)
	q.Queue(claimSettings, strconv.FormatInt(idle, 10))
	q.Queue(claimLockedSQL, s.opts.Now(), n, after).Query(func(rows pgx.Rows) error {
		recs, err := pgx.CollectRows(rows, scanRecord)
		b.recs = recs
		return err
	})
	if err := conn.SendBatch(ctx, q).Close(); err != nil {
		b.close(false)
		return nil, fmt.Errorf("outbox relay %q: claim batch: %w", owner, err)
	}
	// A claim from the head that filled its batch with rows behind the held
	// batches may have left more there: the next claim reads from the head
	// too.
	last := int64(0)
	if len(b.recs) > 0 {
		last = b.recs[len(b.recs)-1].ID
	}
	s.heldIDs.record(b, last, after == 0, after == 0 && top > 0 && len(b.recs) == n && last < top)
	if len(b.recs) == 0 {
		b.Abort()
	}
	return b, nil
}

// claimSettings are a locked claim's transaction settings: its idle time
// bounded by the lease ($1, in milliseconds); idOrder's; and an
// asynchronous commit. The commit records what became of the batch
// (published, failed, leased): should the database crash before it reaches
// the disk (at most three times wal_writer_delay, 600 ms by default), the
// records are published again, the duplicate at-least-once allows, and a
// failed attempt goes uncounted. Waiting for the disk at each commit cost
// the relay about a tenth of its throughput.
const claimSettings = `SELECT set_config('idle_in_transaction_session_timeout', $1, true),
    set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
    set_config('enable_sort', 'off', true), set_config('synchronous_commit', 'off', true)`

// claimLockedSQL selects the claimable rows after id $3.
var claimLockedSQL = claimableRows(recordCols, "id > $3 AND ")

// headScanEvery is how often, at least, a claim while batches are held
// reads the pending index from its head.
var headScanEvery = 100 * time.Millisecond

// heldIDs tracks the batches a store holds open, so that a claim made
// meanwhile starts after them. Read from its head, the pending index leads
// a claim first through the rows those batches lock, each of which it
// tries to lock and skips, and through the rows they just published, whose
// old versions it must visit as long as a transaction older than their
// publication is open; with three batches of 100 held, that was two rows
// visited for each row claimed. Rows behind the held batches that become
// claimable (a write that committed late with a lower id, a retry whose
// delay ended) are taken by the claims that read from the head: at least
// every headScanEvery, whenever no batch is held, and one after another for
// as long as each fills its batch with such rows.
type heldIDs struct {
	mu       sync.Mutex
	open     map[*lockedBatch]int64 // the highest id of each open batch
	lastHead time.Time
	behind   bool // the last claim from the head filled its batch behind the held ones
}

// after returns the id a claim starts after, 0 (from the head) when no
// batch is held, the head was last read headScanEvery ago or the last read
// of it found a full batch behind the held ones; and top, the highest id
// held.
func (h *heldIDs) after(now time.Time) (after, top int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range h.open {
		top = max(top, id)
	}
	if top == 0 || h.behind || now.Sub(h.lastHead) >= headScanEvery {
		h.lastHead = now
		return 0, top
	}
	return top, top
}

// record notes a claim's outcome: b, when it holds rows, as open with last
// its highest id; and, for a claim that read from the head, whether it
// filled its batch with rows behind the held batches (fullBehind). Only a
// read from the head tells: a claim that started after the held batches
// and ended after a concurrent one from the head must not clear what that
// one found.
func (h *heldIDs) record(b *lockedBatch, last int64, head, fullBehind bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if head {
		h.behind = fullBehind
	}
	if len(b.recs) == 0 {
		return
	}
	if h.open == nil {
		h.open = map[*lockedBatch]int64{}
	}
	h.open[b] = last
}

func (h *heldIDs) remove(b *lockedBatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.open, b)
}

// lockedBatch is a stores.LockedBatch: an open transaction on a connection
// of the held pool, holding the row locks of recs.
type lockedBatch struct {
	s     *Store
	conn  *pgxpool.Conn // nil once closed
	owner string
	lease time.Duration
	recs  []stores.OutboxRecord
}

func (b *lockedBatch) Records() []stores.OutboxRecord { return b.recs }

// Finish writes the outcomes and commits in one round trip.
func (b *lockedBatch) Finish(ctx context.Context, published []int64, failed []stores.FailedRecord) (_ []int64, err error) {
	defer unavailable(&err)
	if b.conn == nil {
		return nil, nil
	}
	settled := make(map[int64]bool, len(published)+len(failed))
	for _, id := range published {
		settled[id] = true
	}
	failedIDs := make([]int64, len(failed))
	reasons := make([]string, len(failed))
	for i, f := range failed {
		failedIDs[i], reasons[i] = f.ID, f.Reason
		settled[f.ID] = true
	}
	var left []int64
	for _, r := range b.recs {
		if !settled[r.ID] {
			left = append(left, r.ID)
		}
	}
	now := b.s.opts.Now()
	var stuck []int64
	q := &pgx.Batch{}
	if len(published) > 0 {
		q.Queue(`UPDATE acemq_outbox SET published_at = $2, lease_owner = NULL, lease_until = NULL WHERE id = ANY($1)`, published, now)
	}
	if len(failed) > 0 {
		q.Queue(`
UPDATE acemq_outbox AS o SET last_error = f.reason,`+failedSet+`
FROM unnest($1::bigint[], $5::text[]) AS f(id, reason)
WHERE o.id = f.id
RETURNING o.id, o.stuck_at IS NOT NULL`, failedIDs, b.s.opts.OutboxMaxAttempts, now.Add(b.s.opts.OutboxRetryDelay), now, reasons).Query(func(rows pgx.Rows) error {
			var id int64
			var isStuck bool
			_, err := pgx.ForEachRow(rows, []any{&id, &isStuck}, func() error {
				if isStuck {
					stuck = append(stuck, id)
				}
				return nil
			})
			return err
		})
	}
	if len(left) > 0 {
		// Their outcome is unknown: lease them, as a claim by ClaimBatch
		// would have, so that they are published again after the lease.
		q.Queue(`UPDATE acemq_outbox SET lease_owner = $2, lease_until = $3 WHERE id = ANY($1)`, left, b.owner, now.Add(b.lease))
	}
	q.Queue("COMMIT")
	err = b.conn.SendBatch(ctx, q).Close()
	b.close(err == nil)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == idleInTransactionTimeout {
			return nil, &stores.LeaseLostError{Owner: b.owner, IDs: b.ids()}
		}
		return nil, fmt.Errorf("outbox relay %q: finish a batch of %d rows (unless the commit reached the database before the failure, they are pending again): %w", b.owner, len(b.recs), err)
	}
	return stuck, nil
}

// Abort rolls the batch back.
func (b *lockedBatch) Abort() {
	if b.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := b.conn.Exec(ctx, "ROLLBACK")
	b.close(err == nil)
}

// close returns the connection to the pool when its transaction ended
// cleanly, and closes it otherwise, which ends the transaction.
func (b *lockedBatch) close(clean bool) {
	if b.conn == nil {
		return
	}
	b.s.heldIDs.remove(b)
	if !clean || b.conn.Conn().PgConn().TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = b.conn.Conn().Close(ctx)
		cancel()
	}
	b.conn.Release()
	b.conn = nil
}

func (b *lockedBatch) ids() []int64 {
	out := make([]int64, len(b.recs))
	for i, r := range b.recs {
		out[i] = r.ID
	}
	return out
}
