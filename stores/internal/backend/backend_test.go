package backend

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

func TestSpreadNeverClaimsTwiceInOneBatch(t *testing.T) {
	reqs := []stores.ClaimRequest{{Key: "a"}, {Key: "b"}, {Key: "a"}, {Key: "a"}, {Key: "b"}}
	firsts, firstOf := Dedupe(reqs)
	if len(firsts) != 2 || firsts[0] != 0 || firsts[1] != 1 {
		t.Fatalf("Dedupe firsts = %v, want [0 1]", firsts)
	}
	out := make([]stores.Claim, len(reqs))
	out[0] = stores.Claim{State: stores.Claimed, Token: 7}
	out[1] = stores.Claim{State: stores.AlreadyConfirmed}
	Spread(out, firstOf)
	want := []stores.ClaimState{stores.Claimed, stores.AlreadyConfirmed, stores.InProgress, stores.InProgress, stores.AlreadyConfirmed}
	for i, w := range want {
		if out[i].State != w || (i >= 2 && out[i].Token != 0) {
			t.Errorf("answer %d = %v token %d, want %v without a token", i, out[i].State, out[i].Token, w)
		}
	}
}

func TestPropertiesKeepIntegersExact(t *testing.T) {
	b, err := EncodeProperties(stores.Properties{MessageID: "m", Headers: map[string]any{"n": int64(1) << 60}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodeProperties(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Headers["n"]; got == nil || got.(interface{ String() string }).String() != "1152921504606846976" {
		t.Fatalf("header n = %v, want 1152921504606846976 exactly", got)
	}
	if _, err := DecodeProperties([]byte(`{"headers": [}`)); err == nil {
		t.Fatal("DecodeProperties of broken JSON: nil error")
	}
	if p, err := DecodeProperties(nil); err != nil || p.MessageID != "" {
		t.Fatalf("DecodeProperties(empty) = %+v, %v", p, err)
	}
}

// fakePurger answers the three purges with fixed counts and errors, and
// records the cut-offs it was given.
type fakePurger struct {
	expired, published, ticks          int64
	errExpired, errPublished, errTicks error
	before, ticksBefore                time.Time
	calls                              []string
}

func (f *fakePurger) PurgeTicks(_ context.Context, before time.Time) (int64, error) {
	f.calls = append(f.calls, "ticks")
	f.ticksBefore = before
	return f.ticks, f.errTicks
}

func (f *fakePurger) PurgeSagas(context.Context, time.Time) (int64, error) {
	f.calls = append(f.calls, "sagas")
	return 0, nil
}

func (f *fakePurger) PurgeExpired(context.Context) (int64, error) {
	f.calls = append(f.calls, "expired")
	return f.expired, f.errExpired
}

func (f *fakePurger) PurgePublished(_ context.Context, before time.Time) (int64, error) {
	f.calls = append(f.calls, "published")
	f.before = before
	return f.published, f.errPublished
}

func TestPurgeRunsEveryPurgeEvenWhenOneFails(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	lock := errors.New("purge expired idempotency rows (3 purged before the failure): lock timeout")
	gone := errors.New("purge published outbox rows (0 purged before the failure): connection lost")
	ticks := errors.New("purge schedule ticks (0 purged before the failure): connection lost")
	cases := []struct {
		name string
		f    fakePurger
		want []error
	}{
		{"all succeed", fakePurger{expired: 4, published: 5, ticks: 6}, nil},
		{"the idempotency purge fails", fakePurger{expired: 3, published: 5, ticks: 6, errExpired: lock}, []error{lock}},
		{"the outbox purge fails", fakePurger{expired: 4, ticks: 6, errPublished: gone}, []error{gone}},
		{"the tick purge fails", fakePurger{expired: 4, published: 5, errTicks: ticks}, []error{ticks}},
		{"all fail", fakePurger{expired: 3, errExpired: lock, errPublished: gone, errTicks: ticks}, []error{lock, gone, ticks}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			p, err := Purge(t.Context(), &f, now, time.Hour)
			if !slices.Equal(f.calls, []string{"expired", "published", "ticks", "sagas"}) {
				t.Errorf("Purge called %v, want the four purges in order", f.calls)
			}
			if p.Expired != f.expired || p.Published != f.published || p.Ticks != f.ticks {
				t.Errorf("Purge counted %d expired, %d published and %d ticks, want %d, %d and %d", p.Expired, p.Published, p.Ticks, f.expired, f.published, f.ticks)
			}
			if want := now.Add(-time.Hour); !f.before.Equal(want) || !f.ticksBefore.Equal(want) || !p.PublishedBefore.Equal(want) {
				t.Errorf("Purge cut-offs %v and %v (reported %v), want %v", f.before, f.ticksBefore, p.PublishedBefore, want)
			}
			if (err == nil) != (len(tc.want) == 0) {
				t.Fatalf("Purge error = %v, want %v", err, tc.want)
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("Purge error = %v, want it to hold %v", err, w)
				}
			}
		})
	}
}
