package stores

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// OutboxRecord is one row of the outbox table (its columns are documented in
// stores/README.md).
//
// A writer sets Exchange, RoutingKey, Body, ContentType and Properties, and
// DeliverAt for a message to be delivered later; the store sets the rest. Body holds the payload already encoded: the relay
// publishes those bytes unchanged and never decodes or re-encodes them.
// Attempts counts failed publishes, LastError holds the latest reason, and
// LeaseOwner/LeaseUntil name the relay that holds the row (after a failure,
// LeaseUntil alone says when the row may be handed out again). PublishedAt is
// set once the broker confirmed the row reached a queue; StuckAt once the
// store stopped handing the row out after Options.OutboxMaxAttempts
// failures.
//
// TraceParent is the W3C traceparent of the span the record was written in
// (empty when none): Add records the caller's context (TraceParentOf) when
// the writer sets none, and the relay publishes the message with it as
// its traceparent (the creation context), the relay's own span linked to
// it, so that the writer's trace goes on through the message.
//
// DeliverAt is when the message is due at Exchange; zero means now. The
// relay publishes a record whose DeliverAt is still ahead into the delay
// ladder (FLOW-FORMAT §4), addressed to Exchange and RoutingKey, and the
// runtime that consumes the ladder's due queue delivers it then, never
// early: one commit schedules the message with the writer's own rows. A
// DeliverAt already passed when the relay takes the record publishes it
// straight to Exchange, as a zero one. The stores keep it to the
// millisecond.
type OutboxRecord struct {
	ID          int64
	Exchange    string
	RoutingKey  string
	Body        []byte
	ContentType string
	Properties  Properties
	DeliverAt   time.Time
	CreatedAt   time.Time
	Attempts    int
	LastError   string
	LeaseOwner  string
	LeaseUntil  time.Time
	PublishedAt time.Time
	StuckAt     time.Time
	TraceParent string
	// Invalid is why the row's properties column could not be read (a row
	// written by another program with a value of the wrong type, such as a
	// string priority); nil for a readable row. A store hands such a row out
	// like any other, so that it neither fails the rows claimed with it nor
	// hides them from a listing; the relay does not publish it but records
	// a failed attempt with this reason, so it ends stuck, listed with its
	// reason by `acemq-flow outbox list --stuck`.
	Invalid error
}

// Stuck reports whether the store stopped handing the record out.
func (r OutboxRecord) Stuck() bool { return !r.StuckAt.IsZero() }

// Properties are the AMQP properties the relay publishes an outbox record
// with, stored as one JSON object (the properties column). Empty fields are
// left unset on the message. Header values are JSON values; numbers read
// back as json.Number.
type Properties struct {
	MessageID       string         `json:"message_id,omitempty"`
	CorrelationID   string         `json:"correlation_id,omitempty"`
	ReplyTo         string         `json:"reply_to,omitempty"`
	Type            string         `json:"type,omitempty"`
	AppID           string         `json:"app_id,omitempty"`
	UserID          string         `json:"user_id,omitempty"`
	ContentEncoding string         `json:"content_encoding,omitempty"`
	Expiration      string         `json:"expiration,omitempty"`
	Priority        uint8          `json:"priority,omitempty"`
	DeliveryMode    uint8          `json:"delivery_mode,omitempty"`
	Timestamp       int64          `json:"timestamp,omitempty"`
	Headers         map[string]any `json:"headers,omitempty"`
}

// TraceParentOf returns the W3C traceparent of ctx's span, or "" when ctx
// carries none: what Outbox.Add records as a record's TraceParent when the
// writer sets none.
func TraceParentOf(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// Outbox is the write side of the transactional outbox, for a backend whose
// transactions have type Tx (pgx.Tx for postgres, *sql.Tx for sqlite,
// *memory.Tx for memory).
//
// Add inserts rec inside tx, the caller's own transaction, and returns its
// id, with ctx's trace context as its TraceParent when rec has none. The record becomes visible to the relay when, and only if, tx commits:
// one commit decides both the caller's business rows and the message. That
// is why Add takes a transaction and never a pool; a record written through
// a pool would land in a different transaction. Add does not commit or roll
// back tx. Implementations are safe for concurrent use with different
// transactions.
type Outbox[Tx any] interface {
	Add(ctx context.Context, tx Tx, rec OutboxRecord) (id int64, err error)
}

// ErrLeaseLost is matched (errors.Is) by every *LeaseLostError.
var ErrLeaseLost = errors.New("outbox lease lost")

// LeaseLostError refuses MarkPublished or MarkFailed for rows the relay
// Owner no longer holds: its lease expired and another relay claimed them
// (that relay publishes them again), or the ids are unknown.
type LeaseLostError struct {
	Owner string
	IDs   []int64
}

// Error names the relay and the rows.
func (e *LeaseLostError) Error() string {
	ids := make([]string, len(e.IDs))
	for i, id := range e.IDs {
		ids[i] = fmt.Sprint(id)
	}
	return fmt.Sprintf("outbox relay %q no longer holds the lease on rows %s (taken over by another relay, or unknown ids)", e.Owner, strings.Join(ids, ","))
}

// Is reports whether target is ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// OutboxRelay is the relay side of the outbox: it hands out committed
// records under a lease and records what became of them. It runs on its own
// connection pool, outside any caller's transaction.
//
// Protocol, for a relay named owner (unique per relay process):
//
//  1. ClaimBatch(owner, n, lease): up to n records, oldest first, that are
//     not published, not stuck, and not leased (or whose lease expired).
//     They are leased to owner until now+lease; no other relay gets them
//     until then, so two relays never publish the same row at the same
//     time. On PostgreSQL this is FOR UPDATE SKIP LOCKED.
//  2. Publish each record's Body unchanged.
//  3. Confirmed by the broker and routed to a queue: MarkPublished. Returned
//     unroutable, nacked, or failed: MarkFailed with the reason, which counts
//     an attempt, frees the row after Options.OutboxRetryDelay and, at
//     Options.OutboxMaxAttempts, marks it stuck: no longer handed out, still
//     listed by ListStuck.
//  4. A relay that dies mid-batch simply stops; its lease expires and
//     another relay claims the same rows. A relay that outlived its lease
//     gets a *LeaseLostError from MarkPublished/MarkFailed for the rows it
//     lost, and must not retry them.
//
// Publishing is at least once: a relay can publish and die before
// MarkPublished, and the next relay publishes again. Consumers deduplicate
// with the idempotency store. Any error that is not a *LeaseLostError is a
// failure of the store. Implementations are safe for concurrent use.
type OutboxRelay interface {
	// ClaimBatch leases up to n records to owner for lease.
	ClaimBatch(ctx context.Context, owner string, n int, lease time.Duration) ([]OutboxRecord, error)

	// MarkPublished records that the rows ids, leased to owner, were
	// published. Rows already marked published count as done. Rows owner
	// does not hold are left alone and reported in a *LeaseLostError; the
	// others are marked.
	MarkPublished(ctx context.Context, ids []int64, owner string) error

	// MarkFailed records a failed publish of row id leased to owner: attempts
	// + 1, last error = reason, lease released until the retry delay has
	// passed. stuck reports whether this failure reached the attempt limit.
	MarkFailed(ctx context.Context, id int64, owner, reason string) (stuck bool, err error)

	// ListPending returns up to limit records that are neither published nor
	// stuck (including leased ones), oldest first.
	ListPending(ctx context.Context, limit int) ([]OutboxRecord, error)

	// ListStuck returns up to limit stuck records, oldest first.
	ListStuck(ctx context.Context, limit int) ([]OutboxRecord, error)

	// PurgePublished deletes records published before before and returns how
	// many it deleted.
	PurgePublished(ctx context.Context, before time.Time) (int64, error)
}

// OutboxLocker is an OutboxRelay whose claims can hold their rows by a lock
// instead of a lease column (the PostgreSQL store). ClaimLocked selects up
// to n records as ClaimBatch does, FOR UPDATE SKIP LOCKED, and keeps the
// transaction open: no other relay gets those rows while it lasts, and
// nothing is written to claim them. The relay publishes the records, then
// Finish writes every outcome and commits: one write per published row
// instead of two. The lock is the lease: a relay that dies loses its
// connection and with it the lock, so the rows are handed out again at
// once; a relay that hangs is cut off by the database after lease without a
// statement (idle_in_transaction_session_timeout), and its Finish then fails
// with a *LeaseLostError naming every row of the batch.
//
// Relays claiming with ClaimLocked and with ClaimBatch can share one table:
// each skips the rows the other holds.
type OutboxLocker interface {
	ClaimLocked(ctx context.Context, owner string, n int, lease time.Duration) (LockedBatch, error)
}

// LockedBatch is the open claim ClaimLocked returns; it is used by one
// goroutine at a time.
//
// Records returns the batch's records (empty when nothing was pending: the
// transaction is then already closed). Finish marks published those of
// published, fails those of failed (as MarkFailed: an attempt counted, the
// row released until the retry delay, stuck at the limit; stuck lists
// them), leases the rest to the relay for the claim's lease (their outcome
// is unknown: they are published again after it, as with ClaimBatch), and
// commits. Abort rolls back: every row is pending again at once. After
// either, the batch is closed and further calls do nothing.
type LockedBatch interface {
	Records() []OutboxRecord
	Finish(ctx context.Context, published []int64, failed []FailedRecord) (stuck []int64, err error)
	Abort()
}

// FailedRecord is a record whose publish failed, and why.
type FailedRecord struct {
	ID     int64
	Reason string
}
