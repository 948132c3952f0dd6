package main

import (
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// startAdmin runs a runtime without flows whose admin API requires token,
// and returns the admin address.
func startAdmin(t *testing.T, token string) string {
	t.Helper()
	pl := &plan.Plan{}
	return runtimetest.Admin(t, runtimetest.Run(t, testenv.AMQP(t), pl, runtime.Options{}), pl, token)
}

func TestConsumersNameTheAdminTokenWhenItIsMissingOrRejected(t *testing.T) {
	t.Setenv("ACEMQ_ADMIN_TOKEN", "")
	addr := startAdmin(t, "s3cret")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no token", []string{"consumers", "stop", "orders", "--admin", addr}, "none was given"},
		{"a wrong token", []string{"consumers", "scale", "orders", "2", "--admin", addr, "--admin-token", "wrong"}, "rejected the token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := cli(t, tc.args...)
			if code != 1 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "--admin-token") || !strings.Contains(errOut, "ACEMQ_ADMIN_TOKEN") {
				t.Errorf("acemq-flow %s: exit %d, stderr %q; want exit 1 saying %q and naming --admin-token and ACEMQ_ADMIN_TOKEN",
					strings.Join(tc.args, " "), code, errOut, tc.want)
			}
		})
	}
	t.Run("the right token passes", func(t *testing.T) {
		_, errOut, code := cli(t, "consumers", "stop", "orders", "--admin", addr, "--admin-token", "s3cret")
		if code != 1 || !strings.Contains(errOut, "orders") || strings.Contains(errOut, "token") {
			t.Errorf("consumers stop of an unknown consumer with the right token: exit %d, stderr %q; want exit 1 about the consumer", code, errOut)
		}
	})
}
