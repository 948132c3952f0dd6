package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// RunSagas runs the cases of stores.Sagas: an instance is created once
// across replicas because one insert wins, every write presents the version
// it read and a stale one writes nothing, and what a step recorded reads
// back exactly.
func RunSagas(t *testing.T, open Opener, f Features) {
	cases := []struct {
		name string
		run  func(t *testing.T, open Opener, f Features)
	}{
		{"an instance is created once: a second create returns the first, unchanged", sagaCreatedOnce},
		{"racing creators of one instance on two handles: exactly one creates it and all read the same", sagaCreateRace},
		{"an instance that does not exist reads as none", sagaMissing},
		{"an advance presenting the version read writes the next version; a stale version is refused and writes nothing", sagaAdvanceVersion},
		{"racing advances from one version on two handles: exactly one is written, the others are refused as stale", sagaAdvanceRace},
		{"each step's outcome, output, attempts, times and error read back exactly", sagaStepsRoundTrip},
		{"an advance to an ended state sets the end time, and an ended instance is never advanced again", sagaEnded},
		{"an advance of an instance that does not exist is refused as stale with no current version", sagaAdvanceMissing},
		{"instances list by saga and by state, oldest first, up to a limit", sagaList},
		{"newest first, instances list the last started first, ties by id descending, up to a limit", sagaListNewest},
		{"instances are counted by saga and state, ordered by both, with no entry for a state none is in", sagaCount},
		{"the purge deletes instances ended before the cut-off, never a running or compensating one", sagaPurge},
		{"an instance with no saga, no id or an unknown state is refused", sagaInvalid},
		{"an instance is still there after the store is reopened", sagaDurable},
		{"a saga claim reads the instance with the claim: claimed with the instance as stored, or none for an id never created", sagaClaimReads},
		{"a saga claim after the advance and the confirm is already confirmed and reads the advanced instance", sagaClaimAfterConfirm},
		{"a saga claim is held within its lease and taken over after it, with a larger token, the instance and the first token's confirm refused", sagaClaimTakenOver},
		{"in one batch a key's later claims are never claimed and get the first's instance", sagaClaimBatch},
		{"racing saga claims of one message on two handles: exactly one is claimed, and each claimed or confirmed answer reads the instance", sagaClaimRace},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open, f) })
	}
}

// sagaAt is a new instance of place-order, running its first step.
func sagaAt(id string) stores.SagaInstance {
	return stores.SagaInstance{
		Saga: "place-order", ID: id, State: stores.SagaRunning, Input: []byte(`{"order":"` + id + `"}`),
		ReplyTo: "amq.rabbitmq.reply-to", CorrelationID: "corr-" + id,
		Steps: []stores.SagaStep{
			{Name: "take-payment", State: stores.StepPending},
			{Name: "reserve-stock", State: stores.StepPending},
			{Name: "book-courier", State: stores.StepPending},
		},
	}
}

func createSaga(t *testing.T, s stores.Sagas, inst stores.SagaInstance) stores.SagaInstance {
	t.Helper()
	got, created, err := s.CreateSaga(t.Context(), inst)
	if err != nil {
		t.Fatalf("CreateSaga(%s): %v", inst.ID, err)
	}
	if !created {
		t.Fatalf("CreateSaga(%s) of a new instance: created false", inst.ID)
	}
	return got
}

func getSaga(t *testing.T, s stores.Sagas, id string) stores.SagaInstance {
	t.Helper()
	got, ok, err := s.GetSaga(t.Context(), id)
	if err != nil || !ok {
		t.Fatalf("GetSaga(%s) = %v, %v; want the instance", id, ok, err)
	}
	return got
}

func advanceSaga(t *testing.T, s stores.Sagas, inst stores.SagaInstance) stores.SagaInstance {
	t.Helper()
	got, err := s.AdvanceSaga(t.Context(), inst)
	if err != nil {
		t.Fatalf("AdvanceSaga(%s from version %d): %v", inst.ID, inst.Version, err)
	}
	return got
}

// sameSaga compares two instances field by field, times to the
// millisecond.
func sameSaga(a, b stores.SagaInstance) error {
	switch {
	case a.Saga != b.Saga || a.ID != b.ID || a.State != b.State || a.Step != b.Step:
		return fmt.Errorf("saga/id/state/step %s/%s/%s/%d, want %s/%s/%s/%d", a.Saga, a.ID, a.State, a.Step, b.Saga, b.ID, b.State, b.Step)
	case !bytes.Equal(a.Input, b.Input):
		return fmt.Errorf("input %q, want %q", a.Input, b.Input)
	case a.ReplyTo != b.ReplyTo || a.CorrelationID != b.CorrelationID:
		return fmt.Errorf("reply to %q correlation %q, want %q %q", a.ReplyTo, a.CorrelationID, b.ReplyTo, b.CorrelationID)
	case a.Version != b.Version:
		return fmt.Errorf("version %d, want %d", a.Version, b.Version)
	case !a.StartedAt.Equal(b.StartedAt) || !a.UpdatedAt.Equal(b.UpdatedAt) || !a.EndedAt.Equal(b.EndedAt):
		return fmt.Errorf("started/updated/ended %s/%s/%s, want %s/%s/%s", a.StartedAt, a.UpdatedAt, a.EndedAt, b.StartedAt, b.UpdatedAt, b.EndedAt)
	case len(a.Steps) != len(b.Steps):
		return fmt.Errorf("%d steps, want %d", len(a.Steps), len(b.Steps))
	}
	for i := range a.Steps {
		x, y := a.Steps[i], b.Steps[i]
		if x.Name != y.Name || x.State != y.State || x.Attempts != y.Attempts || !bytes.Equal(x.Output, y.Output) ||
			!x.CompletedAt.Equal(y.CompletedAt) || !x.CompensatedAt.Equal(y.CompensatedAt) || x.Error != y.Error {
			return fmt.Errorf("step %d = %+v, want %+v", i, x, y)
		}
	}
	return nil
}

func sagaCreatedOnce(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	first := createSaga(t, b.Set, sagaAt("m-1"))
	now := clock.Now().UTC().Truncate(time.Millisecond)
	if first.Version != 1 || !first.StartedAt.Equal(now) || !first.UpdatedAt.Equal(now) || !first.EndedAt.IsZero() {
		t.Fatalf("CreateSaga = version %d, started %s, updated %s, ended %s; want version 1, started and updated %s, not ended",
			first.Version, first.StartedAt, first.UpdatedAt, first.EndedAt, now)
	}
	clock.Advance(time.Second)
	again := sagaAt("m-1")
	again.State, again.Input = stores.SagaCompensating, []byte(`{"other":true}`)
	got, created, err := b.Set.CreateSaga(t.Context(), again)
	if err != nil || created {
		t.Fatalf("CreateSaga of an existing id = created %v, %v; want false, nil", created, err)
	}
	if err := sameSaga(got, first); err != nil {
		t.Fatalf("CreateSaga of an existing id returned another instance than the first: %v", err)
	}
	if err := sameSaga(getSaga(t, b.Set, "m-1"), first); err != nil {
		t.Fatalf("GetSaga after a second create: %v", err)
	}
}

func sagaCreateRace(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	handles := []stores.Set{b.Set, b.Peer(t)}
	const goroutines = 16
	for round := range 4 {
		id := fmt.Sprintf("race-%d", round)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			created = make([]bool, goroutines)
			got     = make([]stores.SagaInstance, goroutines)
			errs    = make([]error, goroutines)
		)
		for g := range goroutines {
			wg.Go(func() {
				<-start
				inst := sagaAt(id)
				inst.CorrelationID = fmt.Sprintf("creator-%d", g)
				got[g], created[g], errs[g] = handles[g%2].CreateSaga(t.Context(), inst)
			})
		}
		close(start)
		wg.Wait()
		won := -1
		for g := range goroutines {
			if errs[g] != nil {
				t.Fatalf("round %d: CreateSaga in goroutine %d: %v", round, g, errs[g])
			}
			if created[g] {
				if won >= 0 {
					t.Fatalf("round %d: goroutines %d and %d both created instance %s", round, won, g, id)
				}
				won = g
			}
		}
		if won < 0 {
			t.Fatalf("round %d: %d concurrent CreateSaga of one id: none created it, want exactly 1", round, goroutines)
		}
		for g := range goroutines {
			if got[g].CorrelationID != fmt.Sprintf("creator-%d", won) || got[g].Version != 1 {
				t.Fatalf("round %d: goroutine %d read correlation %q version %d, want the winner's (creator-%d, version 1)",
					round, g, got[g].CorrelationID, got[g].Version, won)
			}
		}
	}
}

func sagaMissing(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	if got, ok, err := b.Set.GetSaga(t.Context(), "nobody"); err != nil || ok {
		t.Fatalf("GetSaga of an id never created = %+v, %v, %v; want none, nil", got, ok, err)
	}
}

func sagaAdvanceVersion(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	v1 := createSaga(t, b.Set, sagaAt("m-1"))
	clock.Advance(time.Second)
	next := v1
	next.Step = 1
	next.Steps = slices.Clone(v1.Steps)
	next.Steps[0] = stores.SagaStep{Name: "take-payment", State: stores.StepCompleted, Attempts: 1, Output: []byte(`{"payment":"p-1"}`), CompletedAt: clock.Now()}
	// What AdvanceSaga must not change.
	next.Saga, next.Input, next.StartedAt = "someone-else", []byte("changed"), clock.Now()
	v2 := advanceSaga(t, b.Set, next)
	if v2.Version != 2 || v2.Step != 1 || v2.Steps[0].State != stores.StepCompleted {
		t.Fatalf("AdvanceSaga from version 1 = version %d step %d first step %s; want version 2, step 1, completed", v2.Version, v2.Step, v2.Steps[0].State)
	}
	if v2.Saga != v1.Saga || !bytes.Equal(v2.Input, v1.Input) || !v2.StartedAt.Equal(v1.StartedAt) {
		t.Fatalf("AdvanceSaga changed saga/input/started to %s/%q/%s, want them kept: %s/%q/%s", v2.Saga, v2.Input, v2.StartedAt, v1.Saga, v1.Input, v1.StartedAt)
	}
	if want := clock.Now().UTC().Truncate(time.Millisecond); !v2.UpdatedAt.Equal(want) {
		t.Fatalf("AdvanceSaga: updated %s, want %s", v2.UpdatedAt, want)
	}
	// A writer that read version 1 too is refused.
	stale := v1
	stale.State = stores.SagaCompensating
	_, err := b.Set.AdvanceSaga(t.Context(), stale)
	var se *stores.StaleSagaError
	if !errors.As(err, &se) || !errors.Is(err, stores.ErrStaleSaga) || se.Version != 1 || se.Current != 2 || se.ID != "m-1" {
		t.Fatalf("AdvanceSaga presenting version 1 after version 2 was written = %v; want a *StaleSagaError (ErrStaleSaga) of version 1, current 2", err)
	}
	if err := sameSaga(getSaga(t, b.Set, "m-1"), v2); err != nil {
		t.Fatalf("the refused advance wrote something: %v", err)
	}
	// The refused writer reads again and decides anew.
	v2.State = stores.SagaCompensating
	if v3 := advanceSaga(t, b.Set, v2); v3.Version != 3 || v3.State != stores.SagaCompensating {
		t.Fatalf("AdvanceSaga from version 2 = version %d %s, want 3 compensating", v3.Version, v3.State)
	}
}

func sagaAdvanceRace(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	handles := []stores.Set{b.Set, b.Peer(t)}
	cur := createSaga(t, b.Set, sagaAt("m-race"))
	const goroutines = 16
	for round := range 4 {
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			got   = make([]stores.SagaInstance, goroutines)
			errs  = make([]error, goroutines)
		)
		for g := range goroutines {
			wg.Go(func() {
				<-start
				next := cur
				next.Steps = slices.Clone(cur.Steps)
				next.Steps[0].Attempts = g + 1
				got[g], errs[g] = handles[g%2].AdvanceSaga(t.Context(), next)
			})
		}
		close(start)
		wg.Wait()
		won := -1
		for g := range goroutines {
			switch {
			case errs[g] == nil && won >= 0:
				t.Fatalf("round %d: goroutines %d and %d both advanced from version %d", round, won, g, cur.Version)
			case errs[g] == nil:
				won = g
			case !errors.Is(errs[g], stores.ErrStaleSaga):
				t.Fatalf("round %d: AdvanceSaga in goroutine %d: %v; want success or ErrStaleSaga", round, g, errs[g])
			}
		}
		if won < 0 {
			t.Fatalf("round %d: %d concurrent AdvanceSaga from version %d: none written, want exactly 1", round, goroutines, cur.Version)
		}
		now := getSaga(t, b.Set, "m-race")
		if now.Version != cur.Version+1 || now.Steps[0].Attempts != won+1 {
			t.Fatalf("round %d: the instance is version %d with attempts %d, want version %d written by goroutine %d (attempts %d)",
				round, now.Version, now.Steps[0].Attempts, cur.Version+1, won, won+1)
		}
		cur = now
	}
}

func sagaStepsRoundTrip(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	v1 := createSaga(t, b.Set, sagaAt("m-1"))
	at := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)
	next := v1
	next.State, next.Step = stores.SagaCompensating, 0
	next.ReplyTo, next.CorrelationID = "reply-queue", "corr-2"
	next.Steps = []stores.SagaStep{
		{Name: "take-payment", State: stores.StepCompensated, Attempts: 2, Output: []byte{0, 1, 2, 0xff, '"'}, CompletedAt: at, CompensatedAt: at.Add(time.Minute)},
		{Name: "reserve-stock", State: stores.StepSkipped},
		{Name: "book-courier", State: stores.StepFailed, Attempts: 8, Error: "courier: no van free \"today\"\nline two"},
	}
	clock.Advance(time.Minute)
	want := next
	want.Version, want.UpdatedAt = 2, clock.Now().UTC().Truncate(time.Millisecond)
	got := advanceSaga(t, b.Set, next)
	if err := sameSaga(got, want); err != nil {
		t.Fatalf("AdvanceSaga returned: %v", err)
	}
	if err := sameSaga(getSaga(t, b.Set, "m-1"), want); err != nil {
		t.Fatalf("GetSaga after AdvanceSaga: %v", err)
	}
	if got := getSaga(t, b.Set, "m-1"); !got.Steps[0].CompletedAt.Equal(at) {
		t.Fatalf("a step's completed_at = %s, want %s to the nanosecond", got.Steps[0].CompletedAt, at)
	}
}

func sagaEnded(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	v1 := createSaga(t, b.Set, sagaAt("m-1"))
	clock.Advance(time.Minute)
	done := v1
	done.State = stores.SagaUnresolved
	v2 := advanceSaga(t, b.Set, done)
	if want := clock.Now().UTC().Truncate(time.Millisecond); !v2.EndedAt.Equal(want) {
		t.Fatalf("AdvanceSaga to unresolved: ended %s, want %s", v2.EndedAt, want)
	}
	again := v2
	again.State = stores.SagaCompleted
	if _, err := b.Set.AdvanceSaga(t.Context(), again); !errors.Is(err, stores.ErrStaleSaga) {
		t.Fatalf("AdvanceSaga of an ended instance at its current version = %v; want ErrStaleSaga", err)
	}
	if got := getSaga(t, b.Set, "m-1"); got.State != stores.SagaUnresolved || got.Version != 2 {
		t.Fatalf("the ended instance is %s version %d, want unresolved version 2", got.State, got.Version)
	}
}

func sagaAdvanceMissing(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	inst := sagaAt("ghost")
	inst.Version = 3
	_, err := b.Set.AdvanceSaga(t.Context(), inst)
	var se *stores.StaleSagaError
	if !errors.As(err, &se) || se.Current != 0 || se.Version != 3 {
		t.Fatalf("AdvanceSaga of an instance never created = %v; want a *StaleSagaError with no current version", err)
	}
	if _, ok, _ := b.Set.GetSaga(t.Context(), "ghost"); ok {
		t.Fatal("AdvanceSaga of a missing instance created it")
	}
}

func sagaList(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	mk := func(saga, id string, state stores.SagaState) {
		inst := sagaAt(id)
		inst.Saga = saga
		v := createSaga(t, b.Set, inst)
		if state != stores.SagaRunning {
			v.State = state
			advanceSaga(t, b.Set, v)
		}
		clock.Advance(time.Second)
	}
	mk("place-order", "o-3", stores.SagaRunning)
	mk("place-order", "o-1", stores.SagaUnresolved)
	mk("refund", "r-1", stores.SagaUnresolved)
	mk("place-order", "o-2", stores.SagaCompleted)
	mk("place-order", "o-4", stores.SagaUnresolved)
	ids := func(f stores.SagaFilter) []string {
		t.Helper()
		got, err := b.Set.ListSagas(t.Context(), f)
		if err != nil {
			t.Fatalf("ListSagas(%+v): %v", f, err)
		}
		var out []string
		for _, i := range got {
			out = append(out, i.ID)
		}
		return out
	}
	for _, tc := range []struct {
		f    stores.SagaFilter
		want []string
	}{
		{stores.SagaFilter{}, []string{"o-3", "o-1", "r-1", "o-2", "o-4"}},
		{stores.SagaFilter{Saga: "place-order"}, []string{"o-3", "o-1", "o-2", "o-4"}},
		{stores.SagaFilter{State: stores.SagaUnresolved}, []string{"o-1", "r-1", "o-4"}},
		{stores.SagaFilter{Saga: "place-order", State: stores.SagaUnresolved}, []string{"o-1", "o-4"}},
		{stores.SagaFilter{Saga: "place-order", Limit: 2}, []string{"o-3", "o-1"}},
		{stores.SagaFilter{Saga: "nothing"}, nil},
	} {
		if got := ids(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("ListSagas(%+v) = %v, want %v", tc.f, got, tc.want)
		}
	}
	// Ties in the start time are ordered by id.
	for _, id := range []string{"t-b", "t-a"} {
		inst := sagaAt(id)
		inst.Saga = "tie"
		createSaga(t, b.Set, inst)
	}
	if got := ids(stores.SagaFilter{Saga: "tie"}); !slices.Equal(got, []string{"t-a", "t-b"}) {
		t.Errorf("ListSagas of two instances started at once = %v, want [t-a t-b]", got)
	}
	got, err := b.Set.ListSagas(t.Context(), stores.SagaFilter{Saga: "place-order", State: stores.SagaCompleted})
	if err != nil || len(got) != 1 {
		t.Fatalf("ListSagas(completed) = %d, %v; want 1", len(got), err)
	}
	if err := sameSaga(got[0], getSaga(t, b.Set, "o-2")); err != nil {
		t.Fatalf("ListSagas returned another instance than GetSaga: %v", err)
	}
}

func sagaListNewest(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	for _, id := range []string{"o-1", "o-2", "r-1", "o-3"} {
		inst := sagaAt(id)
		if id == "r-1" {
			inst.Saga = "refund"
		}
		createSaga(t, b.Set, inst)
		clock.Advance(time.Second)
	}
	// Two started at once: the later id first.
	createSaga(t, b.Set, sagaAt("t-a"))
	createSaga(t, b.Set, sagaAt("t-b"))
	for _, tc := range []struct {
		f    stores.SagaFilter
		want []string
	}{
		{stores.SagaFilter{Newest: true}, []string{"t-b", "t-a", "o-3", "r-1", "o-2", "o-1"}},
		{stores.SagaFilter{Newest: true, Limit: 3}, []string{"t-b", "t-a", "o-3"}},
		{stores.SagaFilter{Newest: true, Saga: "place-order", Limit: 4}, []string{"t-b", "t-a", "o-3", "o-2"}},
		{stores.SagaFilter{Newest: true, Saga: "refund"}, []string{"r-1"}},
	} {
		got, err := b.Set.ListSagas(t.Context(), tc.f)
		if err != nil {
			t.Fatalf("ListSagas(%+v): %v", tc.f, err)
		}
		var ids []string
		for _, i := range got {
			ids = append(ids, i.ID)
		}
		if !slices.Equal(ids, tc.want) {
			t.Errorf("ListSagas(%+v) = %v, want %v", tc.f, ids, tc.want)
		}
	}
}

func sagaCount(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	if got, err := b.Set.CountSagas(t.Context()); err != nil || len(got) != 0 {
		t.Fatalf("CountSagas of an empty store = %v, %v; want none", got, err)
	}
	mk := func(saga, id string, state stores.SagaState) {
		inst := sagaAt(id)
		inst.Saga = saga
		v := createSaga(t, b.Set, inst)
		if state == stores.SagaRunning {
			return
		}
		if state.Ended() {
			v.State = stores.SagaCompensating
			v = advanceSaga(t, b.Set, v)
		}
		v.State = state
		advanceSaga(t, b.Set, v)
	}
	mk("place-order", "o-1", stores.SagaRunning)
	mk("place-order", "o-2", stores.SagaUnresolved)
	mk("place-order", "o-3", stores.SagaUnresolved)
	mk("place-order", "o-4", stores.SagaCompensating)
	mk("refund", "r-1", stores.SagaCompleted)
	mk("place-order", "o-5", stores.SagaRunning)
	mk("place-order", "o-6", stores.SagaRunning)
	got, err := b.Set.CountSagas(t.Context())
	if err != nil {
		t.Fatalf("CountSagas: %v", err)
	}
	want := []stores.SagaCount{
		{Saga: "place-order", State: stores.SagaCompensating, Instances: 1},
		{Saga: "place-order", State: stores.SagaRunning, Instances: 3},
		{Saga: "place-order", State: stores.SagaUnresolved, Instances: 2},
		{Saga: "refund", State: stores.SagaCompleted, Instances: 1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("CountSagas = %+v, want %+v", got, want)
	}
	// The count follows the instances: one moves on, another is purged.
	v := getSaga(t, b.Set, "o-1")
	v.State = stores.SagaCompleted
	advanceSaga(t, b.Set, v)
	if _, err := b.Set.PurgeSagas(t.Context(), clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err = b.Set.CountSagas(t.Context())
	if err != nil {
		t.Fatalf("CountSagas: %v", err)
	}
	want = []stores.SagaCount{
		{Saga: "place-order", State: stores.SagaCompensating, Instances: 1},
		{Saga: "place-order", State: stores.SagaRunning, Instances: 2},
	}
	if !slices.Equal(got, want) {
		t.Errorf("CountSagas after an instance completed and the ended ones were purged = %+v, want %+v", got, want)
	}
}

func sagaPurge(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	end := func(id string, state stores.SagaState) {
		v := createSaga(t, b.Set, sagaAt(id))
		if state != stores.SagaRunning {
			v.State = state
			advanceSaga(t, b.Set, v)
		}
	}
	end("old-completed", stores.SagaCompleted)
	end("old-compensated", stores.SagaCompensated)
	end("old-unresolved", stores.SagaUnresolved)
	end("old-running", stores.SagaRunning)
	end("old-compensating", stores.SagaCompensating)
	cut := clock.Now().Add(time.Second)
	clock.Advance(time.Hour)
	end("new-completed", stores.SagaCompleted)
	n, err := b.Set.PurgeSagas(t.Context(), cut)
	if err != nil || n != 3 {
		t.Fatalf("PurgeSagas = %d, %v; want 3 (the ended ones before the cut-off)", n, err)
	}
	left, err := b.Set.ListSagas(t.Context(), stores.SagaFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, i := range left {
		ids = append(ids, i.ID)
	}
	if want := []string{"new-completed", "old-compensating", "old-running"}; !slices.Equal(sortedCopy(ids), want) {
		t.Fatalf("after PurgeSagas the store holds %v, want %v", ids, want)
	}
	clock.Advance(24 * time.Hour)
	p, err := b.Set.Purge(t.Context())
	if err != nil || p.Sagas != 1 {
		t.Fatalf("Purge a day later = %+v, %v; want 1 saga instance deleted (new-completed; the running ones stay)", p, err)
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

func sagaInvalid(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	for _, tc := range []struct {
		name string
		edit func(*stores.SagaInstance)
	}{
		{"no saga", func(i *stores.SagaInstance) { i.Saga = "" }},
		{"no id", func(i *stores.SagaInstance) { i.ID = "" }},
		{"an unknown state", func(i *stores.SagaInstance) { i.State = "halfway" }},
	} {
		inst := sagaAt("bad")
		tc.edit(&inst)
		if _, _, err := b.Set.CreateSaga(t.Context(), inst); err == nil {
			t.Errorf("CreateSaga of an instance with %s: nil error", tc.name)
		}
	}
	v := createSaga(t, b.Set, sagaAt("good"))
	v.State = "halfway"
	if _, err := b.Set.AdvanceSaga(t.Context(), v); err == nil || errors.Is(err, stores.ErrStaleSaga) {
		t.Errorf("AdvanceSaga to an unknown state = %v; want an error that is not ErrStaleSaga", err)
	}
}

func sagaDurable(t *testing.T, open Opener, f Features) {
	if !f.Durable {
		t.Skip("this backend keeps nothing after Close")
	}
	b, _ := fixture(t, open)
	v := createSaga(t, b.Set, sagaAt("m-1"))
	if err := b.Set.Close(); err != nil {
		t.Fatal(err)
	}
	peer := b.Peer(t)
	if err := sameSaga(getSaga(t, peer, "m-1"), v); err != nil {
		t.Fatalf("GetSaga after reopening: %v", err)
	}
}
