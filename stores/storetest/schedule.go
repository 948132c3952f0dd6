package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// RunScheduleTicks runs the cases of stores.ScheduleTicks: a tick fires
// once across replicas because one insert wins, and its outbox record is
// written with it or not at all.
func RunScheduleTicks(t *testing.T, open Opener, f Features) {
	cases := []struct {
		name string
		run  func(t *testing.T, open Opener, f Features)
	}{
		{"a tick is claimed once and writes its outbox record once", tickClaimedOnce},
		{"racing claimers of one tick on two handles: exactly one wins and one record is written", tickRace},
		{"the last claimed tick reads back per schedule, and an older tick claimed later does not move it back", lastTick},
		{"a claim whose outbox record cannot be written records no tick", tickClaimAtomic},
		{"the purge deletes old ticks but each schedule's latest", tickPurge},
		{"a claimed tick is still there after the store is reopened", tickDurable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open, f) })
	}
}

// tickAt is the i-th tick of the suite's schedules, a second apart.
func tickAt(i int) time.Time { return time.Date(2030, 1, 2, 3, 0, i, 0, time.UTC) }

func tickRecord(schedule string, tick time.Time) stores.OutboxRecord {
	return stores.OutboxRecord{
		Exchange: "billing", RoutingKey: "invoices.nightly", Body: []byte(`{"kind":"nightly"}`), ContentType: "application/json",
		Properties: stores.Properties{MessageID: schedule + "@" + tick.UTC().Format(time.RFC3339),
			Headers: map[string]any{"x-acemq-tick": tick.UTC().Format(time.RFC3339)}},
	}
}

func claimTick(t *testing.T, s stores.ScheduleTicks, schedule string, tick time.Time) bool {
	t.Helper()
	ok, err := s.ClaimTick(t.Context(), schedule, tick, tickRecord(schedule, tick))
	if err != nil {
		t.Fatalf("ClaimTick(%s, %s): %v", schedule, tick, err)
	}
	return ok
}

func wantLastTick(t *testing.T, s stores.ScheduleTicks, schedule string, want time.Time) {
	t.Helper()
	got, ok, err := s.LastTick(t.Context(), schedule)
	switch {
	case err != nil:
		t.Fatalf("LastTick(%s): %v", schedule, err)
	case want.IsZero() && ok:
		t.Fatalf("LastTick(%s) = %s, want none", schedule, got)
	case !want.IsZero() && (!ok || !got.Equal(want)):
		t.Fatalf("LastTick(%s) = %s, %v; want %s", schedule, got, ok, want)
	}
}

func tickClaimedOnce(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	if !claimTick(t, b.Set, "shop/nightly", tickAt(1)) {
		t.Fatal("ClaimTick of a new tick = false, want claimed")
	}
	if claimTick(t, b.Set, "shop/nightly", tickAt(1)) {
		t.Fatal("ClaimTick of a claimed tick = true, want false")
	}
	// Another schedule's tick at the same instant is its own.
	if !claimTick(t, b.Set, "shop/hourly", tickAt(1)) {
		t.Fatal("ClaimTick of another schedule's tick at the same instant = false, want claimed")
	}
	rs, err := b.Set.ListPending(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("ListPending after two claimed ticks and one refused = %d records, want 2", len(rs))
	}
	want := tickRecord("shop/nightly", tickAt(1))
	if r := rs[0]; r.Exchange != want.Exchange || r.RoutingKey != want.RoutingKey || string(r.Body) != string(want.Body) ||
		r.Properties.MessageID != want.Properties.MessageID || r.Properties.Headers["x-acemq-tick"] != want.Properties.Headers["x-acemq-tick"] {
		t.Fatalf("the claimed tick's outbox record = %+v, want %+v", r, want)
	}
}

func tickRace(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	handles := []stores.Set{b.Set, b.Peer(t)}
	const goroutines = 16
	for round := range 4 {
		tick := tickAt(round)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			claimed = make([]bool, goroutines)
			errs    = make([]error, goroutines)
		)
		for g := range goroutines {
			wg.Go(func() {
				<-start
				claimed[g], errs[g] = handles[g%2].ClaimTick(t.Context(), "shop/race", tick, tickRecord("shop/race", tick))
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for g := range goroutines {
			if errs[g] != nil {
				t.Fatalf("round %d: ClaimTick in goroutine %d: %v", round, g, errs[g])
			}
			if claimed[g] {
				won++
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d concurrent ClaimTick of one tick: %d claimed, want exactly 1", round, goroutines, won)
		}
	}
	if got := pendingIDs(t, b.Set); len(got) != 4 {
		t.Fatalf("ListPending after 4 raced ticks = %d records, want 4 (one per tick)", len(got))
	}
}

func lastTick(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	wantLastTick(t, b.Set, "shop/nightly", time.Time{})
	claimTick(t, b.Set, "shop/nightly", tickAt(1))
	claimTick(t, b.Set, "shop/nightly", tickAt(5))
	claimTick(t, b.Set, "shop/nightly", tickAt(3))
	claimTick(t, b.Set, "shop/hourly", tickAt(9))
	wantLastTick(t, b.Set, "shop/nightly", tickAt(5))
	wantLastTick(t, b.Set, "shop/hourly", tickAt(9))
	wantLastTick(t, b.Set, "shop/weekly", time.Time{})
	// Milliseconds are kept.
	ms := tickAt(7).Add(250 * time.Millisecond)
	claimTick(t, b.Set, "shop/fast", ms)
	wantLastTick(t, b.Set, "shop/fast", ms)
}

func tickClaimAtomic(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	bad := tickRecord("shop/nightly", tickAt(1))
	bad.Exchange, bad.RoutingKey = "", ""
	if ok, err := b.Set.ClaimTick(t.Context(), "shop/nightly", tickAt(1), bad); err == nil {
		t.Fatalf("ClaimTick with a record that has neither exchange nor routing key = %v, nil error; want an error", ok)
	}
	wantLastTick(t, b.Set, "shop/nightly", time.Time{})
	if !claimTick(t, b.Set, "shop/nightly", tickAt(1)) {
		t.Fatal("ClaimTick after a failed claim of the same tick = false, want claimed: the failed claim must have recorded nothing")
	}
	if got := pendingIDs(t, b.Set); len(got) != 1 {
		t.Fatalf("ListPending = %v, want the one record of the claim that succeeded", got)
	}
}

func tickPurge(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	for i := range 5 {
		claimTick(t, b.Set, "shop/nightly", tickAt(i))
	}
	claimTick(t, b.Set, "shop/hourly", tickAt(0))
	// Nothing is old enough yet.
	n, err := b.Set.PurgeTicks(t.Context(), tickAt(0))
	if err != nil || n != 0 {
		t.Fatalf("PurgeTicks(before the first tick) = %d, %v; want 0", n, err)
	}
	n, err = b.Set.PurgeTicks(t.Context(), tickAt(3))
	if err != nil || n != 3 {
		t.Fatalf("PurgeTicks(before tick 3) = %d, %v; want 3 (ticks 0-2 of nightly; hourly's only tick is its latest)", n, err)
	}
	clock.Advance(24 * time.Hour)
	p, err := b.Set.Purge(t.Context())
	if err != nil || p.Ticks != 1 {
		t.Fatalf("Purge a day later = %+v, %v; want 1 tick deleted (nightly's tick 3: its latest and hourly's stay)", p, err)
	}
	wantLastTick(t, b.Set, "shop/nightly", tickAt(4))
	wantLastTick(t, b.Set, "shop/hourly", tickAt(0))
	// The purged ticks stay fired: the latest says where the schedule is.
	if claimTick(t, b.Set, "shop/nightly", tickAt(4)) {
		t.Fatal("ClaimTick of the latest tick after a purge = true, want false")
	}
}

func tickDurable(t *testing.T, open Opener, f Features) {
	if !f.Durable {
		t.Skip("this backend keeps nothing after Close")
	}
	b, _ := fixture(t, open)
	claimTick(t, b.Set, "shop/nightly", tickAt(2))
	if err := b.Set.Close(); err != nil {
		t.Fatal(err)
	}
	peer := b.Peer(t)
	wantLastTick(t, peer, "shop/nightly", tickAt(2))
	if claimTick(t, peer, "shop/nightly", tickAt(2)) {
		t.Fatal("ClaimTick after reopening = true, want false: the tick was claimed before")
	}
}
