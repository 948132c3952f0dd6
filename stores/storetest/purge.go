package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// RunPurge runs the cases of Set.Purge, the one call that keeps both tables
// from growing for ever.
func RunPurge(t *testing.T, open Opener, f Features) {
	cases := []struct {
		name string
		run  func(t *testing.T, open Opener, f Features)
	}{
		{"a purge deletes expired claims, old confirmations and long-published records, and keeps the rest", purgeRetention},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open, f) })
	}
}

func purgeRetention(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	ctx := t.Context()
	purge := func(wantExpired, wantPublished int64) {
		t.Helper()
		p, err := b.Set.Purge(ctx)
		if err != nil || p.Expired != wantExpired || p.Published != wantPublished {
			t.Fatalf("Purge = %d expired, %d published, %v; want %d and %d", p.Expired, p.Published, err, wantExpired, wantPublished)
		}
		if want := clock.Now().Add(-publishedRetention); !p.PublishedBefore.Equal(want) {
			t.Fatalf("Purge: published before %v, want the store's clock less the published retention, %v", p.PublishedBefore, want)
		}
	}

	// A stuck record: never published, so never purged.
	stuck := write(t, b, rec(1))[0]
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		claimBatch(t, b.Set, "relay", 1, time.Minute)
		if _, err := b.Set.MarkFailed(ctx, stuck, "relay", "unroutable"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(retryDelay)
	}
	wantState(t, b.Set, "lease", stores.Claimed) // never confirmed: expires after claimTimeout
	c := wantState(t, b.Set, "done", stores.Claimed)
	if err := b.Set.Confirm(ctx, "done", c.Token); err != nil {
		t.Fatal(err)
	}
	written := write(t, b, rec(2), rec(3), rec(4))
	if got := claimBatch(t, b.Set, "relay", 2, 3*publishedRetention); !slices.Equal(ids(got), written[:2]) {
		t.Fatalf("ClaimBatch = %v, want %v", ids(got), written[:2])
	}
	published := clock.Now()
	if err := b.Set.MarkPublished(ctx, written[:1], "relay"); err != nil {
		t.Fatal(err)
	}
	purge(0, 0)

	clock.Advance(retention) // the lease and the confirmation have expired
	if err := b.Set.MarkPublished(ctx, written[1:2], "relay"); err != nil {
		t.Fatal(err)
	}
	purge(2, 0)
	purge(0, 0)

	// The first published record is now older than the published retention;
	// the second is not.
	clock.Advance(published.Add(publishedRetention + time.Minute).Sub(clock.Now()))
	purge(0, 1)
	clock.Advance(retention)
	purge(0, 1)

	if got := pendingIDs(t, b.Set); !slices.Equal(got, written[2:]) {
		t.Errorf("ListPending after the purges = %v, want %v: a pending record was purged", got, written[2:])
	}
	rs, err := b.Set.ListStuck(ctx, 0)
	if err != nil || !slices.Equal(ids(rs), []int64{stuck}) {
		t.Errorf("ListStuck after the purges = %v, %v; want [%d]: a stuck record was purged", ids(rs), err, stuck)
	}
	// Both keys are gone, so a new delivery claims them afresh.
	wantState(t, b.Set, "done", stores.Claimed)
	wantState(t, b.Set, "lease", stores.Claimed)
}
