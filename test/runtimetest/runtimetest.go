// Package runtimetest runs flows on the real broker for the tests of the
// engine and of the packages beside it.
package runtimetest

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/testenv"
)

// Start runs the flow with in-process handlers (opts.Handlers) on the
// broker at url until the test ends, and returns once its consumers run.
func Start(t *testing.T, url, flow string, opts runtime.Options) (*runtime.Runtime, *plan.Plan) {
	t.Helper()
	set, err := spec.Load(testenv.FlowFS(flow), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	return Run(t, url, pl, opts), pl
}

// Run runs pl on the broker at url until the test ends, and returns once
// its consumers run.
func Run(t *testing.T, url string, pl *plan.Plan, opts runtime.Options) *runtime.Runtime {
	t.Helper()
	opts.AMQPURL = url
	rt, err := runtime.New(pl, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	returned := false // Run's error already taken from done
	t.Cleanup(func() {
		cancel()
		if returned {
			return
		}
		if err := <-done; err != nil {
			t.Errorf("Run returned %v after shutdown, want nil", err)
		}
	})
	select {
	case <-rt.Started():
	case err := <-done:
		returned = true
		t.Fatalf("Run failed before starting: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the runtime did not start within 60s")
	}
	return rt
}

// Admin serves rt's admin API (on a free loopback port, requiring token
// when it is not empty) until the test ends, and returns its address.
func Admin(t *testing.T, rt *runtime.Runtime, pl *plan.Plan, token string) string {
	t.Helper()
	return AdminWith(t, admin.Options{Token: token, Runtime: rt, Plan: pl, Metrics: rt.Metrics()})
}

// AdminWith serves an admin API with opts (on a free loopback port when
// opts.Addr is empty) until the test ends, and returns its address.
func AdminWith(t *testing.T, opts admin.Options) string {
	t.Helper()
	if opts.Addr == "" {
		opts.Addr = testenv.FreeAddr(t)
	}
	srv, err := admin.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the admin API's Serve returned %v after shutdown, want nil", err)
		}
	})
	return srv.Addr()
}

// Echo is an in-process handler that returns its payload.
func Echo(_ context.Context, req runtime.Request) (decide.Result, error) {
	return decide.Result{Payload: req.Payload}, nil
}
