package memory

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

var _ stores.Sagas = (*Store)(nil)

// CreateSaga implements stores.Sagas: the check and the insert under one
// lock.
func (s *Store) CreateSaga(ctx context.Context, inst stores.SagaInstance) (stores.SagaInstance, bool, error) {
	if err := stores.CheckSagaInstance(inst); err != nil {
		return stores.SagaInstance{}, false, err
	}
	if err := s.lock(ctx); err != nil {
		return stores.SagaInstance{}, false, err
	}
	defer s.mu.Unlock()
	if cur, ok := s.sagas[inst.ID]; ok {
		return cloneSaga(cur), false, nil
	}
	now := s.now()
	inst.Version, inst.StartedAt, inst.UpdatedAt, inst.EndedAt = 1, now, now, time.Time{}
	if inst.State.Ended() {
		inst.EndedAt = now
	}
	inst = cloneSaga(inst)
	s.sagas[inst.ID] = inst
	return cloneSaga(inst), true, nil
}

// GetSaga implements stores.Sagas.
func (s *Store) GetSaga(ctx context.Context, id string) (stores.SagaInstance, bool, error) {
	if err := s.lock(ctx); err != nil {
		return stores.SagaInstance{}, false, err
	}
	defer s.mu.Unlock()
	cur, ok := s.sagas[id]
	if !ok {
		return stores.SagaInstance{}, false, nil
	}
	return cloneSaga(cur), true, nil
}

// AdvanceSaga implements stores.Sagas: the version check and the write
// under one lock.
func (s *Store) AdvanceSaga(ctx context.Context, inst stores.SagaInstance) (stores.SagaInstance, error) {
	if err := stores.CheckSagaInstance(inst); err != nil {
		return stores.SagaInstance{}, err
	}
	if err := s.lock(ctx); err != nil {
		return stores.SagaInstance{}, err
	}
	defer s.mu.Unlock()
	return s.advanceLocked(inst)
}

// advanceLocked is AdvanceSaga of a valid instance, with s.mu held.
func (s *Store) advanceLocked(inst stores.SagaInstance) (stores.SagaInstance, error) {
	cur, ok := s.sagas[inst.ID]
	if !ok || cur.Version != inst.Version || cur.State.Ended() {
		stale := &stores.StaleSagaError{Saga: inst.Saga, ID: inst.ID, Version: inst.Version}
		if ok {
			stale.Current = cur.Version
		}
		return stores.SagaInstance{}, stale
	}
	now := s.now()
	next := cloneSaga(inst)
	next.Saga, next.Input, next.StartedAt = cur.Saga, cur.Input, cur.StartedAt
	next.Version, next.UpdatedAt, next.EndedAt = cur.Version+1, now, time.Time{}
	if next.State.Ended() {
		next.EndedAt = now
	}
	s.sagas[inst.ID] = next
	return cloneSaga(next), nil
}

// ListSagas implements stores.Sagas.
func (s *Store) ListSagas(ctx context.Context, f stores.SagaFilter) ([]stores.SagaInstance, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []stores.SagaInstance
	for _, inst := range s.sagas {
		if (f.Saga == "" || inst.Saga == f.Saga) && (f.State == "" || inst.State == f.State) {
			out = append(out, cloneSaga(inst))
		}
	}
	slices.SortFunc(out, func(a, b stores.SagaInstance) int {
		if f.Newest {
			a, b = b, a
		}
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.ID, b.ID))
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// PurgeSagas implements stores.Sagas.
func (s *Store) PurgeSagas(ctx context.Context, before time.Time) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	var n int64
	for id, inst := range s.sagas {
		if inst.State.Ended() && inst.EndedAt.Before(before) {
			delete(s.sagas, id)
			n++
		}
	}
	return n, nil
}

// CountSagas implements stores.Sagas.
func (s *Store) CountSagas(ctx context.Context) ([]stores.SagaCount, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	type key struct {
		saga  string
		state stores.SagaState
	}
	n := map[key]int64{}
	for _, inst := range s.sagas {
		n[key{inst.Saga, inst.State}]++
	}
	out := make([]stores.SagaCount, 0, len(n))
	for k, c := range n {
		out = append(out, stores.SagaCount{Saga: k.saga, State: k.state, Instances: c})
	}
	slices.SortFunc(out, func(a, b stores.SagaCount) int {
		return cmp.Or(cmp.Compare(a.Saga, b.Saga), cmp.Compare(a.State, b.State))
	})
	return out, nil
}

// now is the store's clock to the millisecond, as every backend keeps
// an instance's times.
func (s *Store) now() time.Time { return backend.SagaTime(s.opts.Now()) }

func cloneSaga(inst stores.SagaInstance) stores.SagaInstance {
	inst.Input = slices.Clone(inst.Input)
	inst.Steps = slices.Clone(inst.Steps)
	for i := range inst.Steps {
		inst.Steps[i].Output = slices.Clone(inst.Steps[i].Output)
	}
	return inst
}
