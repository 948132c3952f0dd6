package backend

import (
	"testing"

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
