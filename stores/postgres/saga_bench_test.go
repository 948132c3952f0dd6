package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
)

// BenchmarkSagaStepStore is the store's share of a saga's first step, with
// no broker and no runtime: 16 callers, each sending batches of the size a
// consumer with that many deliveries in flight coalesces, create the
// instances (1 KiB inputs), claim their messages with the instances' read,
// advance them and confirm the claims, on a table that grows as it runs.
// The figures to read are steps/s, the most a step's consumers could do
// on this store whatever else ran, and each round trip's mean wait in µs.
func BenchmarkSagaStepStore(b *testing.B) {
	for _, batch := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := storetest.OpenPostgres(b, stores.Options{})
			const callers = 16
			input := []byte(`{"pad":"` + strings.Repeat("x", 1014) + `"}`)
			var (
				mu    sync.Mutex
				waits [4]time.Duration // create, claim, advance, confirm
				n     int
			)
			for b.Loop() {
				var wg sync.WaitGroup
				for c := range callers {
					round := n
					wg.Go(func() {
						var took [4]time.Duration
						if err := sagaStep(b, s, input, fmt.Sprintf("r%d-c%d", round, c), batch, &took); err != nil {
							b.Error(err)
						}
						mu.Lock()
						for i := range took {
							waits[i] += took[i]
						}
						mu.Unlock()
					})
				}
				wg.Wait()
				n++
			}
			b.ReportMetric(float64(n*callers*batch)/b.Elapsed().Seconds(), "steps/s")
			for i, name := range []string{"create-µs", "claim-µs", "advance-µs", "confirm-µs"} {
				b.ReportMetric(float64(waits[i].Microseconds())/float64(n*callers), name)
			}
		})
	}
}

// sagaStep is one caller's batch of first steps; took gets each round
// trip's wait.
func sagaStep(b *testing.B, s stores.Set, input []byte, prefix string, batch int, took *[4]time.Duration) error {
	ctx := b.Context()
	sb := s.(interface {
		CreateSagaBatch(ctx context.Context, insts []stores.SagaInstance) ([]stores.SagaInstance, []bool, error)
		AdvanceSagaBatch(ctx context.Context, insts []stores.SagaInstance) ([]error, error)
	})
	now := time.Now()
	insts := make([]stores.SagaInstance, batch)
	reqs := make([]stores.SagaClaimRequest, batch)
	for i := range insts {
		id := fmt.Sprintf("%s-i%d", prefix, i)
		insts[i] = stores.SagaInstance{ID: id, Saga: "bench", State: stores.SagaRunning, Input: input, StartedAt: now,
			Steps: []stores.SagaStep{{Name: "a", State: stores.StepPending}, {Name: "b", State: stores.StepPending}}}
		reqs[i] = stores.SagaClaimRequest{ClaimRequest: stores.ClaimRequest{Key: "bench.a/" + id}, Instance: id}
	}
	t := time.Now()
	lap := func(i int) {
		took[i] = time.Since(t)
		t = time.Now()
	}
	if _, _, err := sb.CreateSagaBatch(ctx, insts); err != nil {
		return err
	}
	lap(0)
	out, err := s.(stores.SagaClaims).ClaimSagaBatch(ctx, reqs)
	if err != nil {
		return err
	}
	lap(1)
	next := make([]stores.SagaInstance, batch)
	held := make([]stores.Held, batch)
	for i, o := range out {
		if o.State != stores.Claimed || !o.Found {
			return fmt.Errorf("claim of %s = %v, found %v; want claimed with the instance", reqs[i].Key, o.State, o.Found)
		}
		next[i] = o.Instance
		next[i].Step = 1
		next[i].Steps = []stores.SagaStep{{Name: "a", State: stores.StepCompleted, Attempts: 1, Output: []byte(`{}`), CompletedAt: now}, {Name: "b", State: stores.StepPending}}
		held[i] = stores.Held{Key: reqs[i].Key, Token: o.Token}
	}
	refused, err := sb.AdvanceSagaBatch(ctx, next)
	if err != nil {
		return err
	}
	for i, r := range refused {
		if r != nil {
			return fmt.Errorf("advance of %s: %w", next[i].ID, r)
		}
	}
	lap(2)
	if _, err := s.ConfirmBatch(ctx, held); err != nil {
		return err
	}
	lap(3)
	return nil
}
