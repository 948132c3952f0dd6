package sqlite_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/sqlite"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// The relay's writes read the clock once they hold the write lock. A claim
// that read it before waiting for the lock got a lease shortened by the
// wait, or one already over, and a second relay took the same rows at once.
func TestOutboxClockAfterLockWait(t *testing.T) {
	const (
		lease      = 2 * time.Second
		retryDelay = 2 * time.Second
		wait       = time.Hour // the wait for the lock, as the store's clock sees it
	)
	setup := func(t *testing.T) (*sqlite.Store, *clock, int64) {
		clk := newClock(time.UnixMilli(1_700_000_000_000))
		s := storetest.OpenSQLite(t, stores.Options{LockTimeout: time.Minute, OutboxRetryDelay: retryDelay, Now: clk.Now})
		db := app(t, s.Path(), 5*time.Second)
		tx, err := db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		id, err := s.Outbox().Add(t.Context(), tx, stores.OutboxRecord{Exchange: "orders", RoutingKey: "order.placed"})
		if err != nil {
			tx.Rollback()
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return s, clk, id
	}

	t.Run("a claim that waited for the lock gets its whole lease", func(t *testing.T) {
		s, clk, id := setup(t)
		var recs []stores.OutboxRecord
		var err error
		returned := afterLockWait(t, s, clk, wait, func() {
			recs, err = s.ClaimBatch(t.Context(), "relay-a", 10, lease)
		})
		if err != nil {
			t.Fatalf("ClaimBatch(relay-a) after waiting for the lock: %v", err)
		}
		if len(recs) != 1 || recs[0].ID != id {
			t.Fatalf("ClaimBatch(relay-a) after waiting for the lock = %d records, want row %d", len(recs), id)
		}
		if until := recs[0].LeaseUntil; until.Before(returned.Add(lease)) {
			t.Errorf("ClaimBatch(relay-a, lease %s) returned at %s with lease until %s, want at least %s",
				lease, returned.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano), returned.Add(lease).Format(time.RFC3339Nano))
		}
		again, err := s.ClaimBatch(t.Context(), "relay-b", 10, lease)
		if err != nil {
			t.Fatal(err)
		}
		if len(again) != 0 {
			t.Errorf("ClaimBatch(relay-b) right after relay-a's claim = rows %v, want none (relay-a holds them)", ids(again))
		}
	})

	t.Run("a failure marked after waiting for the lock waits the whole retry delay", func(t *testing.T) {
		s, clk, id := setup(t)
		if _, err := s.ClaimBatch(t.Context(), "relay-a", 10, lease); err != nil {
			t.Fatal(err)
		}
		var stuck bool
		var err error
		returned := afterLockWait(t, s, clk, wait, func() {
			stuck, err = s.MarkFailed(t.Context(), id, "relay-a", "broker unreachable")
		})
		if err != nil || stuck {
			t.Fatalf("MarkFailed(%d, relay-a) after waiting for the lock = %t, %v; want false, nil", id, stuck, err)
		}
		pending, err := s.ListPending(t.Context(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) != 1 {
			t.Fatalf("ListPending after MarkFailed = rows %v, want row %d", ids(pending), id)
		}
		if until := pending[0].LeaseUntil; until.Before(returned.Add(retryDelay)) {
			t.Errorf("MarkFailed(%d, relay-a) returned at %s with the row held until %s, want at least %s (the retry delay %s)",
				id, returned.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano), returned.Add(retryDelay).Format(time.RFC3339Nano), retryDelay)
		}
		again, err := s.ClaimBatch(t.Context(), "relay-b", 10, lease)
		if err != nil {
			t.Fatal(err)
		}
		if len(again) != 0 {
			t.Errorf("ClaimBatch(relay-b) right after MarkFailed = rows %v, want none before the retry delay", ids(again))
		}
	})
}

// afterLockWait runs call while another handle holds the write lock on the
// file of s, moves clk on by wait once call has taken the store's one
// connection, and only then lets the lock go. It returns the time on clk
// when call returned. The store takes its connection in BeginTx, before
// BEGIN IMMEDIATE waits for the lock: a call that reads the clock before
// beginning its transaction sees the time before the move, and one that
// reads it only under the lock cannot read it before release.
func afterLockWait(t *testing.T, s *sqlite.Store, clk *clock, wait time.Duration, call func()) time.Time {
	t.Helper()
	release := holdLock(t, s.Path())
	done := make(chan struct{})
	go func() {
		defer close(done)
		call()
	}()
	testenv.Eventually(t, 10*time.Second, func() error {
		select {
		case <-done:
			return nil // it did not wait: the checks after say how it went
		default:
		}
		if s.DB().Stats().InUse == 0 {
			return testenv.Errorf("the call has not taken the store's connection")
		}
		return nil
	})
	now := clk.add(wait)
	release()
	<-done
	return now
}

// holdLock takes the write lock on the SQLite file at path from a handle of
// its own, as an application's long transaction would, until release (or
// the end of the test).
func holdLock(t *testing.T, path string) (release func()) {
	t.Helper()
	conn, err := app(t, path, time.Second).Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
				t.Errorf("release the SQLite write lock: %v", err)
			}
			conn.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// clock is a store clock that moves only when the test moves it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock(start time.Time) *clock {
	return &clock{now: start}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

func ids(recs []stores.OutboxRecord) []int64 {
	var out []int64
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}
