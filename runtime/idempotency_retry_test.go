package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// flakyGateStore fails confirms and releases with err for the first fails
// calls of each, then answers.
type flakyGateStore struct {
	err      error
	fails    int32
	confirms atomic.Int32
	releases atomic.Int32
}

func (f *flakyGateStore) TryClaimBatch(_ context.Context, reqs []stores.ClaimRequest) ([]stores.Claim, error) {
	out := make([]stores.Claim, len(reqs))
	for i := range out {
		out[i] = stores.Claim{State: stores.Claimed, Token: stores.Token(i + 1), ExpiresAt: time.Now().Add(time.Minute)}
	}
	return out, nil
}

func (f *flakyGateStore) ConfirmBatch(_ context.Context, held []stores.Held) ([]error, error) {
	if f.confirms.Add(1) <= f.fails {
		return nil, f.err
	}
	return make([]error, len(held)), nil
}

func (f *flakyGateStore) Release(context.Context, string, stores.Token) error {
	if f.releases.Add(1) <= f.fails {
		return f.err
	}
	return nil
}

func TestClaimGateRetriesConfirmAndReleaseThroughAnOutage(t *testing.T) {
	ticket := func(lease time.Duration) Ticket {
		return Ticket{Key: "shop.charge/m1", Token: 7, Until: time.Now().Add(lease)}
	}
	t.Run("a confirm that met a dropped connection is tried again and succeeds", func(t *testing.T) {
		s := &flakyGateStore{err: errDown, fails: 3}
		g := newClaimGate(s, "shop.charge", time.Minute, nil)
		if err := g.Confirm(t.Context(), ticket(time.Minute)); err != nil {
			t.Fatalf("Confirm through 3 dropped connections = %v, want nil", err)
		}
		if err := g.Release(t.Context(), ticket(time.Minute)); err != nil {
			t.Fatalf("Release through 3 dropped connections = %v, want nil", err)
		}
		if c, r := s.confirms.Load(), s.releases.Load(); c != 4 || r != 4 {
			t.Errorf("store saw %d confirms and %d releases, want 4 of each (3 failed, then one answered)", c, r)
		}
	})
	t.Run("an outage that outlasts the lease is given up at the lease's end", func(t *testing.T) {
		s := &flakyGateStore{err: errDown, fails: 1 << 30}
		g := newClaimGate(s, "shop.charge", time.Minute, nil)
		err := g.Confirm(t.Context(), ticket(300*time.Millisecond))
		if !errors.Is(err, stores.ErrUnavailable) {
			t.Fatalf("Confirm while the store stays down = %v, want the outage", err)
		}
		if n := s.confirms.Load(); n < 2 {
			t.Errorf("store saw %d confirms within a 300ms lease, want it tried again", n)
		}
	})
	t.Run("a failure that is not an outage is not tried again", func(t *testing.T) {
		s := &flakyGateStore{err: errors.New("lock timeout"), fails: 1 << 30}
		g := newClaimGate(s, "shop.charge", time.Minute, nil)
		if err := g.Confirm(t.Context(), ticket(time.Minute)); err == nil {
			t.Fatal("Confirm on a lock timeout = nil, want its error")
		}
		if err := g.Release(t.Context(), ticket(time.Minute)); err == nil {
			t.Fatal("Release on a lock timeout = nil, want its error")
		}
		if c, r := s.confirms.Load(), s.releases.Load(); c != 1 || r != 1 {
			t.Errorf("store saw %d confirms and %d releases, want 1 each", c, r)
		}
	})
	t.Run("the runtime draining ends the tries", func(t *testing.T) {
		s := &flakyGateStore{err: errDown, fails: 1 << 30}
		g := newClaimGate(s, "shop.charge", time.Minute, nil)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := g.Confirm(ctx, ticket(time.Hour)); !errors.Is(err, stores.ErrUnavailable) {
			t.Fatalf("Confirm with its context ended = %v, want the outage at once", err)
		}
	})
}
