package postgres_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
)

func batchInstance(id string) stores.SagaInstance {
	return stores.SagaInstance{Saga: "order", ID: id, State: stores.SagaRunning, Input: []byte(`{"id":"` + id + `"}`),
		Steps: []stores.SagaStep{{Name: "charge", State: "pending"}, {Name: "book", State: "pending"}}}
}

// TestSagaBatches: the batch forms of create, read and advance the saga
// consumers use answer each instance as CreateSaga, GetSaga and AdvanceSaga
// answer it alone: one creator of an id wins, in the batch and against the
// table; a missing id reads as none; a stale version is refused, and of
// two advances of one instance in a batch the second sees the first's
// version.
func TestSagaBatches(t *testing.T) {
	ctx := t.Context()
	s := storetest.OpenPostgres(t, stores.Options{})
	if _, _, err := s.CreateSaga(ctx, batchInstance("old")); err != nil {
		t.Fatal(err)
	}
	creates := []stores.SagaInstance{batchInstance("a"), batchInstance("old"), batchInstance("b"), batchInstance("a")}
	creates[3].Input = []byte(`{"second":true}`)
	out, created, err := s.CreateSagaBatch(ctx, creates)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(created), "[true false true false]"; got != want {
		t.Errorf("CreateSagaBatch(a, old, b, a) created %s, want %s", got, want)
	}
	for i, inst := range out {
		if inst.ID != creates[i].ID || inst.Version != 1 {
			t.Errorf("CreateSagaBatch: answer %d is %q version %d, want %q version 1", i, inst.ID, inst.Version, creates[i].ID)
		}
	}
	if string(out[3].Input) != `{"id":"a"}` {
		t.Errorf("the second create of a in the batch answered input %s, want the first's", out[3].Input)
	}

	got, err := s.GetSagaBatch(ctx, []string{"b", "none", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].ID != "b" || got[1].ID != "" || got[2].ID != "a" || len(got[2].Steps) != 2 {
		t.Errorf("GetSagaBatch(b, none, a) = %q, %q, %q (%d steps); want b, none, a with 2 steps", got[0].ID, got[1].ID, got[2].ID, len(got[2].Steps))
	}

	next := func(id string, version int64, step int) stores.SagaInstance {
		inst := batchInstance(id)
		inst.Version, inst.Step = version, step
		inst.Steps[0].State = "completed"
		return inst
	}
	done := next("b", 1, 1)
	done.State = stores.SagaCompleted
	refused, err := s.AdvanceSagaBatch(ctx, []stores.SagaInstance{
		next("a", 1, 1),   // written: version 2
		next("old", 7, 1), // stale
		next("a", 1, 1),   // a second write from version 1: stale
		next("a", 2, 1),   // from the first's version: written, version 3
		done,              // written and ended
		next("none", 1, 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, wantStale := range []bool{false, true, true, false, false, true} {
		if stale := errors.Is(refused[i], stores.ErrStaleSaga); stale != wantStale || (!wantStale && refused[i] != nil) {
			t.Errorf("AdvanceSagaBatch: answer %d is %v, want stale %v", i, refused[i], wantStale)
		}
	}
	var stale *stores.StaleSagaError
	if !errors.As(refused[1], &stale) || stale.Current != 1 {
		t.Errorf("the refusal of old from version 7 is %v, want one naming the current version 1", refused[1])
	}
	a, _, _ := s.GetSaga(ctx, "a")
	b, _, _ := s.GetSaga(ctx, "b")
	if a.Version != 3 || a.Step != 1 || b.State != stores.SagaCompleted || b.EndedAt.IsZero() {
		t.Errorf("after the batch a is version %d at step %d, b %s ended %v; want a version 3 at step 1, b completed with its end", a.Version, a.Step, b.State, b.EndedAt)
	}
	// An ended instance is not advanced any more.
	refused, err = s.AdvanceSagaBatch(ctx, []stores.SagaInstance{next("b", 2, 1)})
	if err != nil || !errors.Is(refused[0], stores.ErrStaleSaga) {
		t.Errorf("AdvanceSagaBatch of the ended b = %v, %v; want it refused as stale", refused, err)
	}
}
