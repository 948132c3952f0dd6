// Package memory is the in-process store backend, for tests only: it keeps
// everything in maps behind one mutex and forgets it on Close or exit. It
// gives the same answers as the database backends (the conformance suite in
// stores/storetest checks that), except that nothing survives the process.
package memory

import (
	"context"
	"errors"
	"sync"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

// ErrClosed is returned by every method of a closed Store.
var ErrClosed = errors.New("memory store closed")

// Store is an in-memory idempotency store and outbox. It is safe for
// concurrent use. The zero value is not usable; call Open.
type Store struct {
	opts stores.Options

	mu     sync.Mutex
	closed bool
	claims map[string]*claim
	token  stores.Token
	outbox map[int64]*stores.OutboxRecord
	nextID int64
	ticks  map[string]map[int64]struct{}  // schedule → claimed ticks, unix milliseconds
	sagas  map[string]stores.SagaInstance // instance id → instance, deep copies
	reg    registry                       // the schema registry
}

var _ stores.Set = (*Store)(nil)

type claim struct {
	confirmed bool
	token     stores.Token
	owner     string
	expiresAt int64 // unix nanoseconds on the store's clock
}

// Open returns an empty store. It does no I/O; opts are checked and
// defaulted as for every backend.
func Open(opts stores.Options) (*Store, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	return &Store{
		opts:   o,
		claims: make(map[string]*claim),
		outbox: make(map[int64]*stores.OutboxRecord),
		ticks:  make(map[string]map[int64]struct{}),
		sagas:  make(map[string]stores.SagaInstance),
	}, nil
}

// Migrate does nothing: memory has no schema. It exists so that *Store
// satisfies stores.Set.
func (s *Store) Migrate(ctx context.Context) error { return s.check(ctx) }

// CheckSchema reports only whether the store is open.
func (s *Store) CheckSchema(ctx context.Context) error { return s.check(ctx) }

// Purge implements stores.Set: PurgeExpired, then PurgePublished of the
// records published more than Options.PublishedRetention ago.
func (s *Store) Purge(ctx context.Context) (stores.Purged, error) {
	return backend.Purge(ctx, s, s.opts.Now(), s.opts.PublishedRetention)
}

// Close discards everything the store holds. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.claims, s.outbox, s.ticks, s.sagas = nil, nil, nil, nil
	return nil
}

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// lock takes the mutex for one operation, failing like a database would on a
// cancelled context or a closed store.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	return nil
}
