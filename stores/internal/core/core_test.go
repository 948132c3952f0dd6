package core

import (
	"errors"
	"strings"
	"testing"
)

func TestStaleClaimErrorSaysWhatHoldsTheKey(t *testing.T) {
	cases := []struct {
		name string
		err  *StaleClaimError
		want string
	}{
		{"no row", Stale("m-1", 4, 0, false), "no claim exists"},
		{"taken over", Stale("m-1", 4, 9, false), "taken over by token 9"},
		{"taken over and confirmed", Stale("m-1", 4, 9, true), "taken over and confirmed by token 9"},
		{"own claim already confirmed", Stale("m-1", 4, 4, true), "already confirmed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.err.Error()
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, `"m-1"`) || !errors.Is(tc.err, ErrStaleClaim) {
				t.Errorf("Error() = %q, want it to name the key and say %q, and to match ErrStaleClaim", msg, tc.want)
			}
		})
	}
}

func TestSpreadNeverClaimsTwiceInOneBatch(t *testing.T) {
	reqs := []ClaimRequest{{Key: "a"}, {Key: "b"}, {Key: "a"}, {Key: "a"}, {Key: "b"}}
	firsts, firstOf := Dedupe(reqs)
	if len(firsts) != 2 || firsts[0] != 0 || firsts[1] != 1 {
		t.Fatalf("Dedupe firsts = %v, want [0 1]", firsts)
	}
	out := make([]Claim, len(reqs))
	out[0] = Claim{State: Claimed, Token: 7}
	out[1] = Claim{State: AlreadyConfirmed}
	Spread(out, firstOf)
	want := []ClaimState{Claimed, AlreadyConfirmed, InProgress, InProgress, AlreadyConfirmed}
	for i, w := range want {
		if out[i].State != w || (i >= 2 && out[i].Token != 0) {
			t.Errorf("answer %d = %v token %d, want %v without a token", i, out[i].State, out[i].Token, w)
		}
	}
}

func TestPropertiesKeepIntegersExact(t *testing.T) {
	b, err := EncodeProperties(Properties{MessageID: "m", Headers: map[string]any{"n": int64(1) << 60}})
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
