package memory

import (
	"context"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

var _ stores.ScheduleTicks = (*Store)(nil)

// ClaimTick implements stores.ScheduleTicks: the tick and its outbox record
// are written under one lock.
func (s *Store) ClaimTick(ctx context.Context, schedule string, tick time.Time, rec stores.OutboxRecord) (bool, error) {
	if err := backend.CheckTick(schedule, tick); err != nil {
		return false, err
	}
	if err := backend.CheckRecord(rec); err != nil {
		return false, err
	}
	r, err := s.record(rec)
	if err != nil {
		return false, err
	}
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	at := tick.UnixMilli()
	if _, ok := s.ticks[schedule][at]; ok {
		return false, nil
	}
	if s.ticks[schedule] == nil {
		s.ticks[schedule] = map[int64]struct{}{}
	}
	s.ticks[schedule][at] = struct{}{}
	s.nextID++
	r.ID, r.CreatedAt = s.nextID, s.opts.Now()
	s.outbox[r.ID] = &r
	return true, nil
}

// LastTick implements stores.ScheduleTicks.
func (s *Store) LastTick(ctx context.Context, schedule string) (time.Time, bool, error) {
	if err := s.lock(ctx); err != nil {
		return time.Time{}, false, err
	}
	defer s.mu.Unlock()
	var last int64
	ok := false
	for at := range s.ticks[schedule] {
		if !ok || at > last {
			last, ok = at, true
		}
	}
	if !ok {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(last), true, nil
}

// PurgeTicks implements stores.ScheduleTicks.
func (s *Store) PurgeTicks(ctx context.Context, before time.Time) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	cut := before.UnixMilli()
	var n int64
	for _, ticks := range s.ticks {
		var last int64
		for at := range ticks {
			last = max(last, at)
		}
		for at := range ticks {
			if at < cut && at < last {
				delete(ticks, at)
				n++
			}
		}
	}
	return n, nil
}
