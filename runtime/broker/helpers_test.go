package broker

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
	amqp "github.com/rabbitmq/amqp091-go"
)

// env is one test's broker set-up: a unique prefix and a Topology on a
// connection of its own, with every queue and exchange it declares deleted
// in t.Cleanup.
type env struct {
	t    *testing.T
	url  string
	ns   string
	topo *Topology
	log  *slog.Logger
	logs *testenv.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := testenv.AMQP(t)
	e := &env{t: t, url: url, ns: testenv.Names(t), logs: &testenv.Buffer{}}
	e.log = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	conn := e.conn("topology")
	e.topo = NewTopology(conn, e.log)
	t.Cleanup(func() { e.topo.Close() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", e.logs.String())
		}
	})
	return e
}

// conn opens a connection named <prefix>-<role>, closed in t.Cleanup.
func (e *env) conn(role string) *Conn {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Open(ctx, e.url, ConnOptions{Name: e.ns + "-" + role, Log: e.log, BackoffMin: 50 * time.Millisecond, BackoffMax: time.Second})
	if err != nil {
		e.t.Fatalf("Open(%s): %v", role, err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// queue declares a durable queue of the given type named <prefix>-<name>.
func (e *env) queue(name, kind string) string {
	e.t.Helper()
	q := e.ns + "-" + name
	if err := e.topo.DeclareQueue(e.t.Context(), Queue{Name: q, Durable: true, Args: map[string]any{"x-queue-type": kind}}); err != nil {
		e.t.Fatalf("DeclareQueue(%s): %v", q, err)
	}
	e.t.Cleanup(func() { e.topo.DeleteQueue(context.Background(), q) })
	return q
}

func (e *env) exchange(name, kind string) string {
	e.t.Helper()
	x := e.ns + "-" + name
	if err := e.topo.DeclareExchange(e.t.Context(), Exchange{Name: x, Kind: kind, Durable: true}); err != nil {
		e.t.Fatalf("DeclareExchange(%s): %v", x, err)
	}
	e.t.Cleanup(func() { e.topo.DeleteExchange(context.Background(), x) })
	return x
}

func (e *env) publisher(c *Conn, window int) *Publisher {
	e.t.Helper()
	p, err := OpenPublisher(e.t.Context(), c, PublisherOptions{Window: window, Log: e.log})
	if err != nil {
		e.t.Fatalf("OpenPublisher: %v", err)
	}
	e.t.Cleanup(func() { p.Close() })
	return p
}

// waitDepth waits for queue to hold want ready messages.
func (e *env) waitDepth(queue string, want int) {
	e.t.Helper()
	testenv.Eventually(e.t, 20*time.Second, func() error {
		n, err := e.topo.Depth(context.Background(), queue)
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("queue %s holds %d ready messages, want %d", queue, n, want)
		}
		return nil
	})
}

// closeConnection force-closes, on the broker, the connection named name
// and only that one.
func closeConnection(t *testing.T, name string) {
	t.Helper()
	closeConnections(t, name)
}

// closeConnections force-closes, on the broker, the connections with these
// names and no other, all at once.
func closeConnections(t *testing.T, names ...string) {
	t.Helper()
	out := testenv.Rabbitmqctl(t, "-q", "list_connections", "--no-table-headers", "pid", "client_properties")
	var pids []string
	for _, name := range names {
		needle := fmt.Sprintf(`{"connection_name","%s"}`, name)
		found := false
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, needle) {
				pids = append(pids, strings.Fields(line)[0])
				found = true
			}
		}
		if !found {
			t.Fatalf("no connection named %q on the broker:\n%s", name, out)
		}
	}
	errs := make(chan error, len(pids))
	for _, pid := range pids {
		go func() {
			out, err := exec.Command("rabbitmqctl", "close_connection", pid, "closed by test").CombinedOutput()
			if err != nil {
				err = fmt.Errorf("rabbitmqctl close_connection %s: %v\n%s", pid, err, out)
			}
			errs <- err
		}()
	}
	for range pids {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func msg(queue, id string, body []byte) Message {
	return Message{RoutingKey: queue, Publishing: amqp.Publishing{MessageId: id, Body: body}}
}

// TestClosedNotFoundIsAPublishOnAChannelClosedFor404: every publish in
// flight on a channel the broker closed with 404 is one; a 404 that is
// not a publish's outcome, or another close, is not.
func TestClosedNotFoundIsAPublishOnAChannelClosedFor404(t *testing.T) {
	closed := &amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no exchange 'orders-x' in vhost '/'"}
	cases := []struct {
		err  error
		want bool
	}{
		{&IndeterminateError{Exchange: "orders-x", Err: closed}, true},
		{&IndeterminateError{Exchange: "orders", Err: closed}, true},
		{&IndeterminateError{Exchange: "orders-x", Err: &amqp.Error{Code: amqp.ConnectionForced, Reason: "no exchange 'orders-x'"}}, false},
		{closed, false},
	}
	for _, c := range cases {
		if got := ClosedNotFound(c.err); got != c.want {
			t.Errorf("ClosedNotFound(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
