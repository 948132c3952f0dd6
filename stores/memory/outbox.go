package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

// Tx is the memory backend's transaction for the outbox write side: records
// added to it become visible to the relay on Commit and are dropped on
// Rollback. A Tx is used by one goroutine; Commit and Rollback end it.
type Tx struct {
	s    *Store
	mu   sync.Mutex
	recs []stores.OutboxRecord
	done bool
}

// ErrTxDone is returned when a finished Tx is used.
var ErrTxDone = errors.New("memory outbox transaction already committed or rolled back")

// Begin starts a transaction for Outbox.Add.
func (s *Store) Begin() *Tx { return &Tx{s: s} }

// Commit makes the transaction's records visible to the relay.
func (tx *Tx) Commit() error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.done {
		return ErrTxDone
	}
	tx.done = true
	s := tx.s
	if err := s.lock(context.Background()); err != nil {
		return err
	}
	defer s.mu.Unlock()
	for i := range tx.recs {
		r := tx.recs[i]
		s.outbox[r.ID] = &r
	}
	return nil
}

// Rollback drops the transaction's records. Rolling back a finished
// transaction does nothing.
func (tx *Tx) Rollback() error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	tx.done = true
	tx.recs = nil
	return nil
}

// Outbox is the memory backend's outbox write side
// (stores.Outbox[*memory.Tx]). The zero value is ready to use.
type Outbox struct{}

var _ stores.Outbox[*Tx] = Outbox{}

// Outbox returns the write side.
func (s *Store) Outbox() Outbox { return Outbox{} }

// Add implements stores.Outbox: rec is added to tx and appears on commit.
func (Outbox) Add(ctx context.Context, tx *Tx, rec stores.OutboxRecord) (int64, error) {
	if tx == nil {
		return 0, fmt.Errorf("outbox add: nil transaction")
	}
	if err := backend.CheckRecord(rec); err != nil {
		return 0, err
	}
	r, err := tx.s.record(rec)
	if err != nil {
		return 0, err
	}
	if r.TraceParent == "" {
		r.TraceParent = stores.TraceParentOf(ctx)
	}
	s := tx.s
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	s.nextID++
	id := s.nextID
	now := s.opts.Now()
	s.mu.Unlock()

	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.done {
		return 0, ErrTxDone
	}
	r.ID, r.CreatedAt = id, now
	tx.recs = append(tx.recs, r)
	return id, nil
}

// record is the row rec becomes, but its id and creation time. Properties
// round-trip through JSON, as the SQL backends store them, so that a relay
// sees the same values from every backend.
func (s *Store) record(rec stores.OutboxRecord) (stores.OutboxRecord, error) {
	b, err := backend.EncodeProperties(rec.Properties)
	if err != nil {
		return stores.OutboxRecord{}, err
	}
	props, err := backend.DecodeProperties(b)
	if err != nil {
		return stores.OutboxRecord{}, err
	}
	return stores.OutboxRecord{
		Exchange:    rec.Exchange,
		RoutingKey:  rec.RoutingKey,
		Body:        append([]byte{}, rec.Body...),
		ContentType: rec.ContentType,
		Properties:  props,
		DeliverAt:   backend.DeliverAt(rec.DeliverAt),
		TraceParent: rec.TraceParent,
	}, nil
}

func (s *Store) sorted(keep func(*stores.OutboxRecord) bool) []*stores.OutboxRecord {
	var rs []*stores.OutboxRecord
	for _, r := range s.outbox {
		if keep(r) {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *stores.OutboxRecord) int { return cmp.Compare(a.ID, b.ID) })
	return rs
}

func clone(r *stores.OutboxRecord) stores.OutboxRecord {
	c := *r
	c.Body = append([]byte{}, r.Body...)
	return c
}

func pending(r *stores.OutboxRecord) bool { return r.PublishedAt.IsZero() && r.StuckAt.IsZero() }

// ClaimBatch implements stores.OutboxRelay.
func (s *Store) ClaimBatch(ctx context.Context, owner string, n int, lease time.Duration) ([]stores.OutboxRecord, error) {
	if err := backend.CheckClaim(owner, n, lease); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.opts.Now()
	rs := s.sorted(func(r *stores.OutboxRecord) bool { return pending(r) && !r.LeaseUntil.After(now) })
	if len(rs) > n {
		rs = rs[:n]
	}
	out := make([]stores.OutboxRecord, len(rs))
	for i, r := range rs {
		r.LeaseOwner, r.LeaseUntil = owner, now.Add(lease)
		out[i] = clone(r)
	}
	return out, nil
}

// MarkPublished implements stores.OutboxRelay.
func (s *Store) MarkPublished(ctx context.Context, ids []int64, owner string) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := s.opts.Now()
	var lost []int64
	for _, id := range ids {
		r, ok := s.outbox[id]
		switch {
		case ok && !r.PublishedAt.IsZero():
		case ok && r.LeaseOwner == owner && r.StuckAt.IsZero():
			r.PublishedAt, r.LeaseOwner, r.LeaseUntil = now, "", time.Time{}
		default:
			lost = append(lost, id)
		}
	}
	if lost != nil {
		return &stores.LeaseLostError{Owner: owner, IDs: lost}
	}
	return nil
}

// MarkFailed implements stores.OutboxRelay.
func (s *Store) MarkFailed(ctx context.Context, id int64, owner, reason string) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r, ok := s.outbox[id]
	if !ok || r.LeaseOwner != owner || !pending(r) {
		return false, &stores.LeaseLostError{Owner: owner, IDs: []int64{id}}
	}
	now := s.opts.Now()
	r.Attempts++
	r.LastError = reason
	r.LeaseOwner, r.LeaseUntil = "", now.Add(s.opts.OutboxRetryDelay)
	if r.Attempts >= s.opts.OutboxMaxAttempts {
		r.StuckAt, r.LeaseUntil = now, time.Time{}
		return true, nil
	}
	return false, nil
}

// ListPending implements stores.OutboxRelay.
func (s *Store) ListPending(ctx context.Context, limit int) ([]stores.OutboxRecord, error) {
	return s.list(ctx, limit, pending)
}

// ListStuck implements stores.OutboxRelay.
func (s *Store) ListStuck(ctx context.Context, limit int) ([]stores.OutboxRecord, error) {
	return s.list(ctx, limit, func(r *stores.OutboxRecord) bool { return r.Stuck() && r.PublishedAt.IsZero() })
}

func (s *Store) list(ctx context.Context, limit int, keep func(*stores.OutboxRecord) bool) ([]stores.OutboxRecord, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	rs := s.sorted(keep)
	if limit > 0 && len(rs) > limit {
		rs = rs[:limit]
	}
	out := make([]stores.OutboxRecord, len(rs))
	for i, r := range rs {
		out[i] = clone(r)
	}
	return out, nil
}

// PurgePublished implements stores.OutboxRelay.
func (s *Store) PurgePublished(ctx context.Context, before time.Time) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	var n int64
	for id, r := range s.outbox {
		if !r.PublishedAt.IsZero() && r.PublishedAt.Before(before) {
			delete(s.outbox, id)
			n++
		}
	}
	return n, nil
}
