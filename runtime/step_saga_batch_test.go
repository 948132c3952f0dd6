package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
)

// batchingSagas is the memory store with the batch forms a PostgreSQL store
// has, answering each item as the one-by-one methods do, and counting the
// batches and the largest.
type batchingSagas struct {
	*memory.Store
	mu      sync.Mutex
	batches int
	largest int
	held    int           // items of the batches waiting for gate
	gate    chan struct{} // when set, each batch waits for it
}

func (s *batchingSagas) count(n int) {
	if s.gate != nil {
		s.mu.Lock()
		s.held += n
		s.mu.Unlock()
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	s.largest = max(s.largest, n)
}

func (s *batchingSagas) GetSagaBatch(ctx context.Context, ids []string) ([]stores.SagaInstance, error) {
	s.count(len(ids))
	out := make([]stores.SagaInstance, len(ids))
	for i, id := range ids {
		inst, _, err := s.GetSaga(ctx, id)
		if err != nil {
			return nil, err
		}
		out[i] = inst
	}
	return out, nil
}

func (s *batchingSagas) AdvanceSagaBatch(ctx context.Context, insts []stores.SagaInstance) ([]error, error) {
	s.count(len(insts))
	refused := make([]error, len(insts))
	for i, inst := range insts {
		_, refused[i] = s.AdvanceSaga(ctx, inst)
	}
	return refused, nil
}

// TestBatchedSagasAnswerEachCallerItsOwn: concurrent reads and advances
// through a batching store share round trips, and each caller gets its own
// instance, its own refusal; a store without batch forms is used as it is.
func TestBatchedSagasAnswerEachCallerItsOwn(t *testing.T) {
	ctx := t.Context()
	mem, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := batchSagas(mem); got != sagaStore(mem) {
		t.Fatalf("batchSagas(memory store) = %T, want the store itself", got)
	}
	store := &batchingSagas{Store: mem}
	const n = 40
	for i := range n {
		inst := stores.SagaInstance{Saga: "order", ID: fmt.Sprint("i", i), State: stores.SagaRunning, Input: []byte(fmt.Sprint(i)),
			Steps: []stores.SagaStep{{Name: "charge", State: "pending"}}}
		if _, _, err := mem.CreateSaga(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	b := batchSagas(store)
	store.gate = make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprint("i", i)
			inst, ok, err := b.GetSaga(ctx, id)
			if err != nil || !ok || inst.ID != id || string(inst.Input) != fmt.Sprint(i) {
				errs <- fmt.Errorf("GetSaga(%s) = %q input %q, %v, %v; want its own instance", id, inst.ID, inst.Input, ok, err)
				return
			}
			inst.Step = 0
			inst.State = stores.SagaCompleted
			if i%2 == 1 {
				inst.Version = 7 // not the stored version
			}
			_, err = b.AdvanceSaga(ctx, inst)
			if stale := errors.Is(err, stores.ErrStaleSaga); stale != (i%2 == 1) || (!stale && err != nil) {
				errs <- fmt.Errorf("AdvanceSaga(%s from version %d) = %v; want stale only from version 7", id, inst.Version, err)
			}
		})
	}
	// The first sagaMaxInFlight batches of reads (one read each, or more
	// that came together) are held in the store; the other callers join
	// the batch that waits for a slot. Once they all have, the store
	// answers.
	gets := b.(*batchedSagas).gets
	deadline := time.Now().Add(10 * time.Second)
	joined := 0
	for {
		gets.mu.Lock()
		joined = 0
		if gets.open != nil {
			joined = len(gets.open.reqs)
		}
		gets.mu.Unlock()
		store.mu.Lock()
		held := store.held
		store.mu.Unlock()
		if joined+held == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s %d reads are held in the store and %d joined the waiting batch, want all %d in one or the other", held, joined, n)
		}
		time.Sleep(time.Millisecond)
	}
	close(store.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if store.largest < joined || store.batches >= 2*n {
		t.Errorf("%d reads and advances went in %d batches, the largest of %d; want the %d that waited for a slot in one at least", 2*n, store.batches, store.largest, joined)
	}
	for i := range n {
		inst, _, _ := mem.GetSaga(ctx, fmt.Sprint("i", i))
		if want := map[bool]stores.SagaState{true: stores.SagaRunning, false: stores.SagaCompleted}[i%2 == 1]; inst.State != want {
			t.Errorf("instance i%d is %s, want %s", i, inst.State, want)
		}
	}
}
