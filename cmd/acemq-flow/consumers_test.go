package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/testenv"
)

// startAdmin runs a runtime without flows whose admin API requires token,
// and returns the admin address.
func startAdmin(t *testing.T, token string) string {
	t.Helper()
	addr := testenv.FreeAddr(t)
	pl := &plan.Plan{}
	rt, err := runtime.New(pl, runtime.Options{AMQPURL: testenv.AMQP(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(admin.Options{Addr: addr, Token: token, Runtime: rt, Plan: pl, Metrics: rt.Metrics()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- rt.Run(ctx) }()
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
	})
	select {
	case <-rt.Started():
	case err := <-done:
		t.Fatalf("Run failed before starting: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the runtime did not start within 60s")
	}
	return addr
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
