package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestConsumersListGoldens runs testdata/consumers/shop.yaml with
// in-process handlers and the admin API, in a vhost of the test's own,
// sends a known number of messages, waits (polling the registry) until
// every one is settled, and lists the consumers: a step group of two
// handlers, a step that acknowledges, a consumer that dead-letters
// everything, an idempotent consumer that gets a message twice (prefetch 1,
// so the second delivery comes once the first is confirmed: a duplicate,
// never in progress), and one that does not start by itself (no depth: its
// queue is declared when it starts).
func TestConsumersListGoldens(t *testing.T) {
	t.Setenv("ACEMQ_ADMIN_TOKEN", "")
	const flows = "testdata/consumers/shop.yaml"
	url := testenv.VHost(t)
	set, err := spec.Load(os.DirFS("."), flows)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	echo := func(_ context.Context, req runtime.Request) (decide.Result, error) {
		return decide.Result{Payload: req.Payload}, nil
	}
	handlers := map[string]runtime.HandlerFunc{
		"k.echo": echo,
		// An order on hold goes no further: the run stops there.
		"k.check": func(ctx context.Context, req runtime.Request) (decide.Result, error) {
			if bytes.Contains(req.Payload, []byte(`"hold":true`)) {
				return decide.Result{Stop: true}, nil
			}
			return echo(ctx, req)
		},
		"k.reject": func(context.Context, runtime.Request) (decide.Result, error) {
			return decide.Result{}, fmt.Errorf("%w: audit events are not accepted", decide.ErrFatal)
		},
	}
	st, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	addr := startRuntime(t, url, pl, runtime.Options{Handlers: handlers, Store: st})

	for _, data := range []string{`{"order":1}`, `{"order":2,"hold":true}`, `{"order":3}`} {
		args := []string{"send", flows, "--pipeline", "orders", "--data", data, "--amqp", url, "--wait", "30s"}
		if out, errOut, code := cli(t, args...); code != 0 {
			t.Fatalf("acemq-flow %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
		}
	}
	for _, data := range []string{`{"event":"login"}`, `{"event":"logout"}`} {
		args := []string{"send", "--exchange", "events", "--routing-key", "audit", "--data", data, "--amqp", url}
		if out, errOut, code := cli(t, args...); code != 0 {
			t.Fatalf("acemq-flow %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
		}
	}
	publish(t, url, "events", "payment", "pay-1", "pay-1", "pay-2")
	want := map[string]map[string]int64{
		"orders.check": {decide.OutcomeAcknowledged: 2, decide.OutcomeStopped: 1},
		"orders.ship":  {decide.OutcomeAcknowledged: 2},
		"audit":        {decide.OutcomeDeadLettered: 2},
		"payments":     {decide.OutcomeAcknowledged: 2, decide.OutcomeDuplicate: 1},
		"late":         {},
	}
	client := admin.NewClient(addr, "")
	testenv.Eventually(t, 30*time.Second, func() error {
		list, err := client.Consumers(t.Context())
		if err != nil {
			return err
		}
		if len(list) != len(want) {
			return testenv.Errorf("%d consumers listed, want %d", len(list), len(want))
		}
		for _, c := range list {
			for k, n := range c.Counters {
				if n != want[c.ID][k] {
					return testenv.Errorf("consumer %s: %s = %d, want %d", c.ID, k, n, want[c.ID][k])
				}
			}
			// A running consumer's depth is asked of the broker for each
			// listing; one it did not give in time is shown as "-".
			running := c.State == runtime.StateRunning
			if c.InFlight != 0 || (running && (c.Depth == nil || *c.Depth != 0)) {
				return testenv.Errorf("consumer %s: %d in flight, depth %v; want none left", c.ID, c.InFlight, c.Depth)
			}
		}
		return nil
	})

	for name, args := range map[string][]string{"list.txt": nil, "list.json": {"--format", "json"}} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"consumers", "list", "--admin", addr}, args...)
			out, errOut, code := cli(t, args...)
			if code != 0 {
				t.Fatalf("acemq-flow %s: exit %d\nstderr: %s", strings.Join(args, " "), code, errOut)
			}
			golden(t, filepath.Join("testdata/consumers", name+".golden"), []byte(out))
		})
	}
}

// startRuntime runs pl on the broker at url with opts (in-process
// handlers) and the admin API (no token) until the test ends, and returns
// the admin address once the consumers run.
func startRuntime(t *testing.T, url string, pl *plan.Plan, opts runtime.Options) string {
	t.Helper()
	return runtimetest.Admin(t, runtimetest.Run(t, url, pl, opts), pl, "")
}

// publish sends a message with each of ids to exchange with routing key
// key, in order on one channel, each confirmed before the next.
func publish(t *testing.T, url, exchange, key string, ids ...string) {
	t.Helper()
	ch := testenv.ConfirmedChannel(t, url)
	for _, id := range ids {
		c, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), exchange, key, true, false,
			amqp.Publishing{MessageId: id, ContentType: "application/json", Body: []byte(`{"amount":10}`)})
		if err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		ok, err := c.WaitContext(ctx)
		cancel()
		if !ok || err != nil {
			t.Fatalf("publish %s: not confirmed (%v)", id, err)
		}
	}
}
