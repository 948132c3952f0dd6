// Package testenv gates integration tests on the real services acemq-flow
// runs against, and gives each test names of its own on the shared broker.
//
// A test that needs RabbitMQ calls AMQP(t); one that needs PostgreSQL calls
// Postgres(t). Each skips only when its environment variable is unset (so
// `go test ./...` on a laptop without services still passes the pure tests)
// and fails when the variable is set but the service does not answer: a test
// never passes because a service was missing. `make test` sets both.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The environment variables `make test` exports.
const (
	AMQPEnv     = "ACEMQ_TEST_AMQP_URL"
	PostgresEnv = "ACEMQ_TEST_POSTGRES_URL"
)

// AMQP returns the broker URL from ACEMQ_TEST_AMQP_URL. It skips the test when
// the variable is unset or -short is given, and fails it when the broker does
// not accept TCP connections.
func AMQP(t testing.TB) string {
	t.Helper()
	return service(t, AMQPEnv)
}

// Postgres returns the database URL from ACEMQ_TEST_POSTGRES_URL. It skips
// the test when the variable is unset or -short is given, and fails it when
// the database does not accept TCP connections.
func Postgres(t testing.TB) string {
	t.Helper()
	return service(t, PostgresEnv)
}

func service(t testing.TB, env string) string {
	t.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		t.Skipf("%s is unset; run `make services` and `make test` (which sets it) to run this test", env)
	}
	if testing.Short() {
		t.Skipf("-short: skipping the test that needs %s", env)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", env, err)
	}
	host := u.Host
	if u.Port() == "" {
		switch u.Scheme {
		case "amqp":
			host = net.JoinHostPort(u.Hostname(), "5672")
		case "postgres", "postgresql":
			host = net.JoinHostPort(u.Hostname(), "5432")
		}
	}
	conn, err := net.DialTimeout("tcp", host, 3*time.Second)
	if err != nil {
		t.Fatalf("%s is set to %s but nothing answers there (%v); start it with `make services`", env, u.Redacted(), err)
	}
	conn.Close()
	return raw
}

var unsafe = regexp.MustCompile(`[^A-Za-z0-9-]+`)

// Names returns a prefix unique to this test run, safe for exchange and queue
// names ("t-<test>-<random>"), so tests sharing one broker never see each
// other's messages. The caller deletes what it declares, typically with
// DeleteQueues in t.Cleanup.
func Names(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := strings.Trim(unsafe.ReplaceAllString(t.Name(), "-"), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	return strings.ToLower("t-" + name + "-" + hex.EncodeToString(b))
}

// Rabbitmqctl runs rabbitmqctl with args and returns its output. It fails the
// test when the command is missing or exits non-zero.
func Rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// BrokerConsumer is one consumer RabbitMQ lists on a queue.
type BrokerConsumer struct {
	Channel  string // the channel's process id, alike for consumers sharing one
	Prefetch string // its prefetch_count
}

// BrokerConsumers lists, with rabbitmqctl, the consumers on queue in url's
// virtual host.
func BrokerConsumers(t testing.TB, url, queue string) []BrokerConsumer {
	t.Helper()
	out := Rabbitmqctl(t, "list_consumers", "-p", VHostOf(url), "-q", "--no-table-headers", "queue_name", "channel_pid", "prefetch_count")
	var cs []BrokerConsumer
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == queue {
			cs = append(cs, BrokerConsumer{Channel: f[1], Prefetch: f[2]})
		}
	}
	return cs
}

// Eventually calls check every interval until it returns nil or the deadline
// passes, then fails the test with the last error. It is for conditions that
// have no event to wait on (a queue's depth on the broker), never a stand-in
// for an event that can be received.
func Eventually(t testing.TB, deadline time.Duration, check func() error) {
	t.Helper()
	end := time.Now().Add(deadline)
	var err error
	for {
		if err = check(); err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("condition not met within %s: %v", deadline, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Errorf is fmt.Errorf, here so that checks passed to Eventually read short.
func Errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// PSQL runs one query with psql against url and returns its single value.
func PSQL(t testing.TB, url, query string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "psql", url, "-tAq", "-v", "ON_ERROR_STOP=1", "-c", query).CombinedOutput()
	if err != nil {
		t.Fatalf("psql %s: %v\n%s", query, err, out)
	}
	return strings.TrimSpace(string(out))
}

// PostgresSchema returns a PostgreSQL URL whose search_path is a schema of
// the test's own, created now and dropped (with its tables) in t.Cleanup.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	raw := Postgres(t)
	schema := strings.ReplaceAll(Names(t), "-", "_")
	psql := func(sql string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "psql", raw, "-v", "ON_ERROR_STOP=1", "-c", sql).CombinedOutput()
		if err != nil {
			t.Fatalf("psql %s: %v\n%s", sql, err, out)
		}
	}
	psql(fmt.Sprintf("CREATE SCHEMA %q", schema))
	t.Cleanup(func() { psql(fmt.Sprintf("DROP SCHEMA %q CASCADE", schema)) })
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	// options=-csearch_path=… is understood by pgx and by psql alike.
	q := u.Query()
	q.Set("options", "-csearch_path="+schema)
	u.RawQuery = q.Encode()
	return u.String()
}
