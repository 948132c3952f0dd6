package stores_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

func TestOptionsDefaultsAndLimits(t *testing.T) {
	o, err := stores.Options{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.ClaimTimeout != 5*time.Minute || o.Retention != 7*24*time.Hour || o.PublishedRetention != 7*24*time.Hour ||
		o.OutboxMaxAttempts != 10 || o.OutboxRetryDelay != 5*time.Second || o.Now == nil {
		t.Errorf("defaults = %+v", o)
	}
	cases := []struct {
		name string
		o    stores.Options
	}{
		{"claim timeout longer than retention", stores.Options{ClaimTimeout: 2 * time.Hour, Retention: time.Hour}},
		{"claim timeout longer than the default retention", stores.Options{ClaimTimeout: 8 * 24 * time.Hour}},
		{"negative retry delay", stores.Options{OutboxRetryDelay: -time.Second}},
		{"negative published retention", stores.Options{PublishedRetention: -time.Hour}},
		{"negative max attempts", stores.Options{OutboxMaxAttempts: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.o.WithDefaults(); err == nil {
				t.Fatalf("WithDefaults(%+v): nil error", tc.o)
			}
		})
	}
}

func TestStaleClaimErrorSaysWhatHoldsTheKey(t *testing.T) {
	cases := []struct {
		name string
		err  *stores.StaleClaimError
		want string
	}{
		{"no row", &stores.StaleClaimError{Key: "m-1", Token: 4}, "no claim exists"},
		{"taken over", &stores.StaleClaimError{Key: "m-1", Token: 4, Current: 9}, "taken over by token 9"},
		{"taken over and confirmed", &stores.StaleClaimError{Key: "m-1", Token: 4, Current: 9, Confirmed: true}, "taken over and confirmed by token 9"},
		{"own claim already confirmed", &stores.StaleClaimError{Key: "m-1", Token: 4, Current: 4, Confirmed: true}, "already confirmed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.err.Error()
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, `"m-1"`) || !errors.Is(tc.err, stores.ErrStaleClaim) {
				t.Errorf("Error() = %q, want it to name the key and say %q, and to match ErrStaleClaim", msg, tc.want)
			}
		})
	}
}

// The backends import stores for its types, never the reverse (STYLE.md
// §1): stores imports nothing of this module, so opening a store URL is
// left to stores/storeurl.
func TestStoresImportsNothingOfTheModule(t *testing.T) {
	const pkg = "github.com/acemq/acemq-flow/stores"
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep != pkg && strings.HasPrefix(dep, "github.com/acemq/acemq-flow/") {
			t.Errorf("stores imports %s; the backends and their helpers import stores, never the reverse", dep)
		}
	}
}
