// Package storetest is the conformance suite every store backend runs: one
// function per store (RunIdempotency, RunOutbox), RunPurge for the purge of
// both, RunAll for all three, and RunSchema for backends with tables. Each
// behaviour is a named subtest, and each bug the seed documents admit to has
// its own case, named after it.
//
// A backend's test hands the suite an Opener, which builds a fresh, migrated
// store for one subtest with the Options the suite chooses (including a fake
// clock, so that leases expire without sleeping), and registers its cleanup
// with t.Cleanup. Concurrency cases use real goroutines against the real
// database, through two handles with their own connection pools.
package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// Features lists honest differences between backends. A feature flag never
// excuses a guarantee; it only says a case cannot be expressed.
type Features struct {
	// Durable: what one handle wrote is still there after it is closed and
	// another handle is opened on the same data. False for memory.
	Durable bool
}

// Backend is one fresh store under test and the hooks the suite needs to
// reach it from outside.
type Backend struct {
	// Set is the store under test, migrated and empty.
	Set stores.Set

	// Peer opens another handle on the same data with its own connection
	// pool, closed by the test's cleanup. Concurrency cases race Set against
	// Peer.
	Peer func(t *testing.T) stores.Set

	// WriteOutbox writes recs through the backend's outbox write side in one
	// transaction of the backend's own type, begun on a connection that is
	// not the store's (as an application's would be), and commits it, or
	// rolls it back when commit is false.
	WriteOutbox func(ctx context.Context, commit bool, recs ...stores.OutboxRecord) ([]int64, error)

	// InsertSQL inserts one outbox row with plain SQL, exactly as
	// stores/README.md tells a service in another language to, with
	// properties as JSON text. Nil for memory, which has no SQL.
	InsertSQL func(ctx context.Context, exchange, routingKey string, body []byte, contentType, properties string) error

	// LockHeld takes the write lock on the store's tables from another
	// connection and returns a handle on the same data whose statements
	// give up waiting for a lock after a short LockTimeout, and a function
	// that releases the lock. Nil for memory, which has no lock to wait on.
	LockHeld func(t *testing.T) (impatient stores.Set, release func())
}

// Opener builds a Backend for one subtest with opts.
type Opener func(t *testing.T, opts stores.Options) Backend

// Clock is a fake clock for Options.Now: it moves only when Advance is
// called. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// The options every subtest's store is opened with.
const (
	claimTimeout       = time.Minute
	retention          = time.Hour
	publishedRetention = 2 * time.Hour
	maxAttempts        = 3
	retryDelay         = 10 * time.Second
)

// fixture opens a fresh store on a fake clock.
func fixture(t *testing.T, open Opener) (Backend, *Clock) {
	t.Helper()
	clock := NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	b := open(t, stores.Options{
		ClaimTimeout:       claimTimeout,
		Retention:          retention,
		PublishedRetention: publishedRetention,
		OutboxMaxAttempts:  maxAttempts,
		OutboxRetryDelay:   retryDelay,
		Now:                clock.Now,
	})
	if b.Set == nil || b.Peer == nil || b.WriteOutbox == nil {
		t.Fatal("storetest: the Opener must set Set, Peer and WriteOutbox")
	}
	return b, clock
}

// RunAll runs every suite for one backend.
func RunAll(t *testing.T, open Opener, f Features) {
	t.Run("idempotency", func(t *testing.T) { RunIdempotency(t, open, f) })
	t.Run("outbox", func(t *testing.T) { RunOutbox(t, open, f) })
	t.Run("purge", func(t *testing.T) { RunPurge(t, open, f) })
	t.Run("schedule ticks", func(t *testing.T) { RunScheduleTicks(t, open, f) })
	t.Run("sagas", func(t *testing.T) { RunSagas(t, open, f) })
	t.Run("schemas", func(t *testing.T) { RunSchemas(t, open, f) })
}

// RunSchema checks, for a backend with tables, that opening a store creates
// nothing, that a store without its tables fails loudly rather than
// answering, and that Migrate is repeatable. open returns a store on an
// empty database that nobody has migrated.
func RunSchema(t *testing.T, open func(t *testing.T) stores.Set) {
	ctx := t.Context()
	s := open(t)

	err := s.CheckSchema(ctx)
	var se *stores.SchemaError
	if !asSchema(err, &se) || se.Have >= 0 {
		t.Fatalf("CheckSchema before Migrate = %v, want a *SchemaError saying the tables are missing", err)
	}
	c, err := s.TryClaim(ctx, stores.ClaimRequest{Key: "k"})
	if err == nil {
		t.Fatalf("TryClaim without tables = %v, nil error; want an error (a missing table must not read as an answer)", c.State)
	}
	if _, err := s.ClaimBatch(ctx, "relay", 1, time.Minute); err == nil {
		t.Fatal("ClaimBatch without tables: nil error, want an error")
	}
	for i := range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate #%d: %v", i+1, err)
		}
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
	if c, err := s.TryClaim(ctx, stores.ClaimRequest{Key: "k"}); err != nil || c.State != stores.Claimed {
		t.Fatalf("TryClaim after Migrate = %v, %v; want claimed", c.State, err)
	}
}
