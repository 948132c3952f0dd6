// Package test holds checks of the project as a whole.
package test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportBoundaries keeps the packages' dependencies pointing one way
// (STYLE.md §1): a flow can be checked with no broker or database code, a
// plugin carries none of the runtime, and stores know nothing of flows.
func TestImportBoundaries(t *testing.T) {
	const mod = "github.com/acemq/acemq-flow/"
	cases := []struct {
		pkg       string
		forbidden []string
	}{
		{"spec", []string{mod + "runtime", mod + "plugins", mod + "stores", "github.com/rabbitmq/amqp091-go", "github.com/jackc/pgx"}},
		{"schemas", []string{mod + "spec", mod + "runtime", mod + "plugins", mod + "stores"}},
		{"plugins/sdk", []string{mod + "runtime", mod + "spec", mod + "stores", mod + "plugins/host"}},
		{"plugins/host", []string{mod + "runtime", mod + "spec", mod + "stores"}},
		{"stores", []string{mod + "runtime", mod + "spec", mod + "plugins"}},
		{"runtime/broker", []string{mod + "spec", mod + "plugins", mod + "stores", mod + "runtime$"}},
	}
	for _, tc := range cases {
		t.Run(tc.pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", mod+tc.pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", tc.pkg, err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				if dep == mod+tc.pkg {
					continue
				}
				for _, f := range tc.forbidden {
					// "x$" forbids x itself; anything else, x and below it.
					exact, isExact := strings.CutSuffix(f, "$")
					if isExact && dep == exact || !isExact && strings.HasPrefix(dep, f) {
						t.Errorf("%s imports %s, which it must not (%s)", tc.pkg, dep, f)
					}
				}
			}
		})
	}
}
