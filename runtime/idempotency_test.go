package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/stores/sqlite"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// gateStep is one call in a gate scenario: on gate "a" or "b" (two
// replicas of one consumer) or "other" (another consumer), begin, confirm
// or release message id, or advance the clock.
type gateStep struct {
	gate    string
	op      string // begin, confirm, release, advance
	id      string
	advance time.Duration
	want    stores.ClaimState // for begin
	wantErr error             // errors.Is target; nil wants success
}

func TestClaimGateProtocol(t *testing.T) {
	const lease = time.Minute
	cases := []struct {
		name  string
		steps []gateStep
	}{
		{"a confirmed message is a duplicate on the next delivery", []gateStep{
			{gate: "a", op: "begin", id: "m1", want: stores.Claimed},
			{gate: "a", op: "confirm", id: "m1"},
			{gate: "a", op: "begin", id: "m1", want: stores.AlreadyConfirmed},
			{gate: "b", op: "begin", id: "m1", want: stores.AlreadyConfirmed},
		}},
		{"a claim held by another replica is in progress, not a duplicate", []gateStep{
			{gate: "a", op: "begin", id: "m1", want: stores.Claimed},
			{gate: "b", op: "begin", id: "m1", want: stores.InProgress},
			{gate: "a", op: "begin", id: "m1", want: stores.InProgress},
		}},
		{"an expired claim is taken over and the slow holder's confirm is refused", []gateStep{
			{gate: "a", op: "begin", id: "m1", want: stores.Claimed},
			{op: "advance", advance: lease + time.Second},
			{gate: "b", op: "begin", id: "m1", want: stores.Claimed},
			{gate: "a", op: "confirm", id: "m1", wantErr: stores.ErrStaleClaim},
			{gate: "b", op: "confirm", id: "m1"},
			{gate: "a", op: "begin", id: "m1", want: stores.AlreadyConfirmed},
		}},
		{"a claim just inside its lease stays in progress", []gateStep{
			{gate: "a", op: "begin", id: "m1", want: stores.Claimed},
			{op: "advance", advance: lease - time.Second},
			{gate: "b", op: "begin", id: "m1", want: stores.InProgress},
		}},
		{"a released claim is claimed again at once", []gateStep{
			{gate: "a", op: "begin", id: "m1", want: stores.Claimed},
			{gate: "a", op: "release", id: "m1"},
			{gate: "b", op: "begin", id: "m1", want: stores.Claimed},
			{gate: "b", op: "confirm", id: "m1"},
		}},
		{"release after confirm is refused and the message stays confirmed", []gateStep{
			{gate: "a", op: "begin", id: "m1", want: stores.Claimed},
			{gate: "a", op: "confirm", id: "m1"},
			{gate: "a", op: "release", id: "m1", wantErr: stores.ErrStaleClaim},
			{gate: "b", op: "begin", id: "m1", want: stores.AlreadyConfirmed},
		}},
		{"the key includes the consumer, so another consumer handles the same message", []gateStep{
			{gate: "a", op: "begin", id: "m1", want: stores.Claimed},
			{gate: "a", op: "confirm", id: "m1"},
			{gate: "other", op: "begin", id: "m1", want: stores.Claimed},
		}},
		{"a message without an id is refused, not claimed", []gateStep{
			{gate: "a", op: "begin", id: "", wantErr: ErrNoMessageID},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := testenv.NewClock()
			st, err := memory.Open(stores.Options{ClaimTimeout: lease, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			gates := map[string]*claimGate{
				"a":     newClaimGate(st, "shop.charge", 0, nil),
				"b":     newClaimGate(st, "shop.charge", 0, nil),
				"other": newClaimGate(st, "shop.refund", 0, nil),
			}
			tickets := map[string]Ticket{} // by gate+id
			for i, s := range tc.steps {
				g := gates[s.gate]
				var err error
				switch s.op {
				case "advance":
					clock.Advance(s.advance)
					continue
				case "begin":
					var tk Ticket
					var state stores.ClaimState
					tk, state, err = g.Begin(t.Context(), s.id)
					if err == nil && state != s.want {
						t.Fatalf("step %d: gate %s Begin(%q) = %v, want %v", i, s.gate, s.id, state, s.want)
					}
					if err == nil && state == stores.Claimed {
						tickets[s.gate+s.id] = tk
					}
				case "confirm":
					err = g.Confirm(t.Context(), tickets[s.gate+s.id])
				case "release":
					err = g.Release(t.Context(), tickets[s.gate+s.id])
				}
				switch {
				case s.wantErr == nil && err != nil:
					t.Fatalf("step %d: gate %s %s(%q): %v, want success", i, s.gate, s.op, s.id, err)
				case s.wantErr != nil && !errors.Is(err, s.wantErr):
					t.Fatalf("step %d: gate %s %s(%q): error %v, want %v", i, s.gate, s.op, s.id, err, s.wantErr)
				}
			}
		})
	}
}

func TestClaimGateKey(t *testing.T) {
	if got, want := IdempotencyKey("shop.charge", "o-1/x"), "shop.charge/o-1/x"; got != want {
		t.Errorf("IdempotencyKey(shop.charge, o-1/x) = %q, want %q", got, want)
	}
}

// brokenStore fails or misanswers every call.
type brokenStore struct {
	err   error
	state stores.ClaimState
}

func (b brokenStore) TryClaimBatch(_ context.Context, reqs []stores.ClaimRequest) ([]stores.Claim, error) {
	if b.err != nil {
		return nil, b.err
	}
	out := make([]stores.Claim, len(reqs))
	for i := range out {
		out[i].State = b.state
	}
	return out, nil
}

func (b brokenStore) ConfirmBatch(context.Context, []stores.Held) ([]error, error) { return nil, b.err }
func (b brokenStore) Release(context.Context, string, stores.Token) error          { return b.err }

func TestClaimGateStoreFailureIsNeverAState(t *testing.T) {
	lockTimeout := errors.New("lock timeout")
	cases := []struct {
		name  string
		store brokenStore
	}{
		{"a store error is returned as an error", brokenStore{err: lockTimeout}},
		{"an answer outside the protocol is an error, not in progress", brokenStore{state: 0}},
		{"a state the protocol does not have is an error", brokenStore{state: 42}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newClaimGate(tc.store, "shop.charge", 0, nil)
			_, state, err := g.Begin(t.Context(), "m1")
			if err == nil {
				t.Fatalf("Begin on %+v = %v, nil; want an error", tc.store, state)
			}
			if state != 0 {
				t.Errorf("Begin on %+v returned state %v with its error, want none", tc.store, state)
			}
			if tc.store.err != nil && !errors.Is(err, tc.store.err) {
				t.Errorf("Begin: error %v does not wrap the store's %v", err, tc.store.err)
			}
		})
	}
	t.Run("confirm of a ticket without a claim is refused", func(t *testing.T) {
		g := newClaimGate(brokenStore{}, "shop.charge", 0, nil)
		if err := g.Confirm(t.Context(), Ticket{Key: "shop.charge/m1"}); err == nil {
			t.Error("Confirm(ticket without token) = nil, want an error")
		}
		if err := g.Release(t.Context(), Ticket{Key: "shop.charge/m1"}); err == nil {
			t.Error("Release(ticket without token) = nil, want an error")
		}
	})
}

// recorder is a send function that answers each request with itself and
// records batch sizes; while hold is set, each call waits for a release.
type recorder struct {
	mu      sync.Mutex
	sizes   []int
	hold    chan struct{}
	entered chan struct{}
}

func (r *recorder) send(ctx context.Context, reqs []string) ([]string, error) {
	r.mu.Lock()
	r.sizes = append(r.sizes, len(reqs))
	r.mu.Unlock()
	if r.entered != nil {
		r.entered <- struct{}{}
	}
	if r.hold != nil {
		<-r.hold
	}
	out := make([]string, len(reqs))
	for i, q := range reqs {
		out[i] = "answer:" + q
	}
	return out, nil
}

// waitJoined waits until the coalescer's open batch holds n requests (0: no
// batch is open, as right after one filled up).
func waitJoined[Req, Resp any](t *testing.T, c *coalescer[Req, Resp], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		got, open := 0, c.open != nil
		if open {
			got = len(c.open.reqs)
		}
		c.mu.Unlock()
		if got >= n && (n > 0 || !open) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("open batch holds %d requests after 10s, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestClaimCoalescerBatchesConcurrentCallers(t *testing.T) {
	cases := []struct {
		name      string
		max       int
		waiting   int
		wantSizes []int
	}{
		{"callers arriving during a round trip go together", 128, 50, []int{1, 50}},
		{"a batch holds at most max requests", 16, 40, []int{1, 16, 16, 8}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{hold: make(chan struct{}), entered: make(chan struct{}, 100)}
			c := newCoalescer(tc.max, 1, time.Minute, rec.send)
			var wg sync.WaitGroup
			answers := make([]string, tc.waiting+1)
			errs := make([]error, tc.waiting+1)
			call := func(i int) {
				wg.Go(func() { answers[i], errs[i] = c.do(t.Context(), fmt.Sprint(i)) })
			}
			call(0)
			<-rec.entered // the first caller is in the store alone
			// One caller at a time, each seen in its batch before the next,
			// so the batches are the same on every run.
			for i := 1; i <= tc.waiting; i++ {
				call(i)
				waitJoined(t, c, i%tc.max)
			}
			close(rec.hold)
			wg.Wait()
			for i := range answers {
				if errs[i] != nil || answers[i] != fmt.Sprint("answer:", i) {
					t.Errorf("caller %d got %q, %v; want its own answer %q", i, answers[i], errs[i], fmt.Sprint("answer:", i))
				}
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			// The first batch is the lone first caller; the order of the
			// others depends on which leader gets the slot first.
			got := slices.Clone(rec.sizes)
			slices.Sort(got[1:])
			want := slices.Clone(tc.wantSizes)
			slices.Sort(want[1:])
			if !slices.Equal(got, want) {
				t.Errorf("batch sizes %v, want %v", rec.sizes, tc.wantSizes)
			}
		})
	}
}

func TestClaimCoalescerStoreErrorReachesEveryCaller(t *testing.T) {
	boom := errors.New("connection reset")
	entered, hold := make(chan struct{}, 10), make(chan struct{})
	calls := 0
	c := newCoalescer(64, 1, time.Minute, func(ctx context.Context, reqs []string) ([]string, error) {
		calls++
		entered <- struct{}{}
		<-hold
		if calls == 1 {
			return []string{"ok"}, nil
		}
		return nil, boom
	})
	var wg sync.WaitGroup
	wg.Go(func() { c.do(t.Context(), "first") })
	<-entered
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() { _, errs[i] = c.do(t.Context(), fmt.Sprint(i)) })
	}
	waitJoined(t, c, len(errs))
	close(hold)
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, boom) {
			t.Errorf("caller %d: error %v, want %v", i, err, boom)
		}
	}
}

func TestClaimGateReleasesAbandonedClaims(t *testing.T) {
	clock := testenv.NewClock()
	st, err := memory.Open(stores.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	entered, hold := make(chan struct{}, 10), make(chan struct{})
	held := holdingStore{Store: st, entered: entered, hold: hold}
	g := newClaimGate(held, "shop.charge", 0, nil)
	// Fill every round-trip slot, so that the next batch waits: its first
	// caller leads it (and always sends it), the second only waits.
	var wg sync.WaitGroup
	for i := range gateMaxInFlight {
		wg.Go(func() { g.Begin(t.Context(), fmt.Sprint("busy-", i)) })
		<-entered
	}
	wg.Go(func() { g.Begin(t.Context(), "leader") })
	waitJoined(t, g.claims, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := g.Begin(ctx, "abandoned")
		done <- err
	}()
	waitJoined(t, g.claims, 2)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Begin with a cancelled context: %v, want context.Canceled", err)
	}
	close(hold)
	wg.Wait()
	// The batch still claimed "abandoned"; the gate released it, so another
	// replica claims it at once instead of after the lease.
	other := newClaimGate(st, "shop.charge", 0, nil)
	if _, state, err := other.Begin(t.Context(), "abandoned"); err != nil || state != stores.Claimed {
		t.Errorf("Begin(abandoned) after the abandoned claim = %v, %v; want claimed", state, err)
	}
}

// holdingStore makes its first TryClaimBatch wait for hold.
type holdingStore struct {
	*memory.Store
	entered chan struct{}
	hold    chan struct{}
}

func (h holdingStore) TryClaimBatch(ctx context.Context, reqs []stores.ClaimRequest) ([]stores.Claim, error) {
	h.entered <- struct{}{}
	<-h.hold
	return h.Store.TryClaimBatch(ctx, reqs)
}

// TestClaimGateReplicasRace runs two gates, each on its own handle to one
// database (two replicas), on the same message ids, each id delivered
// several times to both at once. A delivery that finds the claim in progress
// comes round again, as the 1s rung would bring it. Exactly one handler call
// per id, and every id ends confirmed.
func TestClaimGateReplicasRace(t *testing.T) {
	backends := []struct {
		name string
		open func(t *testing.T) (stores.Set, stores.Set)
	}{
		{"sqlite", func(t *testing.T) (stores.Set, stores.Set) {
			path := filepath.Join(t.TempDir(), "acemq.db")
			a, err := sqlite.Open(t.Context(), path, stores.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			if err := a.Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			b, err := sqlite.Open(t.Context(), path, stores.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return a, b
		}},
		{"postgres", func(t *testing.T) (stores.Set, stores.Set) {
			u := testenv.PostgresSchema(t)
			a := storetest.OpenPostgresURL(t, u, stores.Options{})
			if err := a.Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			return a, storetest.OpenPostgresURL(t, u, stores.Options{})
		}},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			sa, sb := be.open(t)
			gates := []*claimGate{newClaimGate(sa, "shop.charge", 0, nil), newClaimGate(sb, "shop.charge", 0, nil)}
			const ids, copies = 200, 3 // each id delivered 3 times to each replica
			var handled [ids]atomic.Int32
			var duplicates, inProgress atomic.Int64
			deliver := func(g *claimGate, id int) error {
				msg := fmt.Sprintf("m-%d", id)
				for {
					tk, state, err := g.Begin(t.Context(), msg)
					if err != nil {
						return err
					}
					switch state {
					case stores.Claimed:
						handled[id].Add(1)
						if err := g.Confirm(t.Context(), tk); err != nil {
							return err
						}
						return nil
					case stores.AlreadyConfirmed:
						duplicates.Add(1)
						return nil
					case stores.InProgress:
						inProgress.Add(1) // round again
					}
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, ids*copies*2)
			for _, g := range gates {
				for c := range copies {
					wg.Go(func() {
						for i := range ids {
							// Spread the order so that replicas meet on every id.
							id := (i*7 + c*13) % ids
							if err := deliver(g, id); err != nil {
								errs <- err
								return
							}
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for id := range handled {
				if n := handled[id].Load(); n != 1 {
					t.Errorf("message m-%d: handler called %d times, want exactly 1", id, n)
				}
			}
			if got, want := duplicates.Load(), int64(ids*(copies*2-1)); got != want {
				t.Errorf("%d deliveries acknowledged as duplicates, want %d", got, want)
			}
			t.Logf("%s: %d in-progress trips", be.name, inProgress.Load())
		})
	}
}
