package runtime

import (
	"context"
	"fmt"

	"github.com/acemq/acemq-flow/stores"
)

// sagaBatchStore is what a store offers that reads and advances many saga
// instances in one round trip each (stores/postgres). A saga consumer's
// concurrent deliveries then share those round trips, as an idempotent
// consumer's share their claims and confirms: each instance read and
// written alone cost a round trip, and a wait for a pool connection, per
// delivery, twice a step.
type sagaBatchStore interface {
	// GetSagaBatch returns ids[i]'s instance at out[i], the zero instance
	// (ID "") for one the store does not have.
	GetSagaBatch(ctx context.Context, ids []string) ([]stores.SagaInstance, error)
	// AdvanceSagaBatch writes each instance from the version it presents:
	// refused[i] matches stores.ErrStaleSaga when insts[i]'s version is no
	// longer the stored one; err is a failure of the store.
	AdvanceSagaBatch(ctx context.Context, insts []stores.SagaInstance) (refused []error, err error)
}

// sagaMaxInFlight is how many round trips of each kind (reads, advances,
// creates) one saga consumer has at once: a write's round trip is its
// commit, which takes the time of a flush to disk however many instances it
// writes, so more at once serve more deliveries while the others wait.
const sagaMaxInFlight = 4

// batchedSagas is a saga consumer's store with its reads and advances
// coalesced (gateMaxBatch a round trip, sagaMaxInFlight at once), and its creates too when the store can batch them.
type batchedSagas struct {
	sagaStore
	gets     *coalescer[string, stores.SagaInstance]
	advances *coalescer[stores.SagaInstance, error]
	creates  *coalescer[stores.SagaInstance, sagaCreated] // nil: one by one
}

// batchSagas returns store with its reads and advances coalesced when it
// can batch them, and store itself otherwise.
func batchSagas(store sagaStore) sagaStore {
	b, ok := store.(sagaBatchStore)
	if !ok {
		return store
	}
	out := &batchedSagas{
		sagaStore: store,
		gets:      newCoalescer(gateMaxBatch, sagaMaxInFlight, gateOpTimeout, b.GetSagaBatch),
		advances:  newCoalescer(gateMaxBatch, sagaMaxInFlight, gateOpTimeout, b.AdvanceSagaBatch),
	}
	if cb, ok := store.(sagaCreateBatchStore); ok {
		out.creates = newCoalescer(gateMaxBatch, sagaMaxInFlight, gateOpTimeout, createBatch(cb))
	}
	return out
}

func (s *batchedSagas) GetSaga(ctx context.Context, id string) (stores.SagaInstance, bool, error) {
	inst, err := s.gets.do(ctx, id)
	if err != nil {
		return stores.SagaInstance{}, false, fmt.Errorf("saga instance %q: read it: %w", id, err)
	}
	return inst, inst.ID != "", nil
}

// AdvanceSaga returns inst as written, its version the next one; the
// saga wrapper reads only the error.
func (s *batchedSagas) AdvanceSaga(ctx context.Context, inst stores.SagaInstance) (stores.SagaInstance, error) {
	refused, err := s.advances.do(ctx, inst)
	if err != nil {
		return stores.SagaInstance{}, fmt.Errorf("saga %q: advance instance %q from version %d: %w", inst.Saga, inst.ID, inst.Version, err)
	}
	if refused != nil {
		return stores.SagaInstance{}, refused
	}
	inst.Version++
	return inst, nil
}

// sagaCreateBatchStore is what a store offers that creates many saga
// instances in one round trip (stores/postgres).
type sagaCreateBatchStore interface {
	// CreateSagaBatch creates each instance unless its id exists: out[i]
	// is the instance stored, created[i] whether insts[i] made it.
	CreateSagaBatch(ctx context.Context, insts []stores.SagaInstance) (out []stores.SagaInstance, created []bool, err error)
}

// sagaCreated is one create's answer.
type sagaCreated struct {
	inst    stores.SagaInstance
	created bool
}

func (s *batchedSagas) CreateSaga(ctx context.Context, inst stores.SagaInstance) (stores.SagaInstance, bool, error) {
	if s.creates == nil {
		return s.sagaStore.CreateSaga(ctx, inst)
	}
	if err := stores.CheckSagaInstance(inst); err != nil {
		return stores.SagaInstance{}, false, err
	}
	c, err := s.creates.do(ctx, inst)
	if err != nil {
		return stores.SagaInstance{}, false, fmt.Errorf("saga %q: create instance %q: %w", inst.Saga, inst.ID, err)
	}
	return c.inst, c.created, nil
}

func createBatch(b sagaCreateBatchStore) func(ctx context.Context, insts []stores.SagaInstance) ([]sagaCreated, error) {
	return func(ctx context.Context, insts []stores.SagaInstance) ([]sagaCreated, error) {
		out, created, err := b.CreateSagaBatch(ctx, insts)
		if err != nil {
			return nil, err
		}
		res := make([]sagaCreated, len(out))
		for i := range out {
			res[i] = sagaCreated{out[i], created[i]}
		}
		return res, nil
	}
}
