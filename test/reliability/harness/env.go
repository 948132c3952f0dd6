package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The environment variables the suite reads; `make chaos` sets both.
const (
	AMQPEnv     = "ACEMQ_TEST_AMQP_URL"
	PostgresEnv = "ACEMQ_TEST_POSTGRES_URL"
)

// Services is what one scenario runs against: a vhost of its own on the
// shared broker and a schema of its own on the shared database, both
// removed when the test ends.
type Services struct {
	AMQP     string // the broker URL, pointing at the scenario's vhost
	VHost    string
	Postgres string // the database URL as given
	Ledger   string // the database URL with search_path at the ledger's schema
	// On the private cluster (ClusterEnv): Node is the node rabbitmqctl
	// asks ("" on the shared broker: rabbitmqctl's default), URLs every
	// node's URL at the vhost.
	Node string
	URLs []string
}

// Env gates the scenario on both services (skipping when a variable is
// unset, failing when a service does not answer; -short keeps it running,
// with smaller sizes) and creates the vhost and the ledger's schema.
func Env(t testing.TB) *Services {
	t.Helper()
	amqpURL, pgURL := need(t, AMQPEnv, "5672"), need(t, PostgresEnv, "5432")
	s := &Services{Postgres: pgURL}
	s.VHost = Name(t)
	Rabbitmqctl(t, "add_vhost", s.VHost)
	t.Cleanup(func() { _, _ = rabbitmqctl("delete_vhost", s.VHost) })
	u, _ := url.Parse(amqpURL)
	user := "guest"
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	Rabbitmqctl(t, "set_permissions", "-p", s.VHost, user, ".*", ".*", ".*")
	u.Path, u.RawPath = "/"+url.PathEscape(s.VHost), ""
	s.AMQP = u.String()
	s.Ledger = Schema(t, pgURL, "ledger")
	return s
}

func need(t testing.TB, env, port string) string {
	t.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		t.Skipf("%s is unset; run `make services` and `make chaos` (which sets it) to run the reliability suite", env)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", env, err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), port)
	}
	c, err := net.DialTimeout("tcp", host, 3*time.Second)
	if err != nil {
		t.Fatalf("%s is set to %s but nothing answers there (%v); start it with `make services`", env, u.Redacted(), err)
	}
	c.Close()
	return raw
}

var unsafe = regexp.MustCompile(`[^a-z0-9]+`)

// Name returns a name unique to this run of the test, safe for a vhost, a
// queue, a PostgreSQL schema or role ("rel_<test>_<random>").
func Name(t testing.TB) string {
	t.Helper()
	name := strings.Trim(unsafe.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(name) > 30 {
		name = name[:30]
	}
	return "rel_" + name + "_" + Random(4)
}

// Random returns n random bytes as hex.
func Random(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Schema creates a PostgreSQL schema of the test's own (dropped with its
// tables in t.Cleanup) and returns raw with search_path set to it.
func Schema(t testing.TB, raw, purpose string) string {
	t.Helper()
	schema := Name(t) + "_" + purpose
	PSQL(t, raw, fmt.Sprintf("CREATE SCHEMA %q", schema))
	t.Cleanup(func() { _, _ = psql(raw, fmt.Sprintf("DROP SCHEMA IF EXISTS %q CASCADE", schema)) })
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-csearch_path="+schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// PSQL runs sql with psql against raw and returns its output, unaligned
// and without headers; it fails the test on an error.
func PSQL(t testing.TB, raw, sql string) string {
	t.Helper()
	out, err := psql(raw, sql)
	if err != nil {
		t.Fatalf("psql %s: %v", sql, err)
	}
	return out
}

func psql(raw, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "psql", raw, "-tAq", "-v", "ON_ERROR_STOP=1", "-c", sql).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w\n%s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Rabbitmqctl runs rabbitmqctl with args and returns its output; it fails
// the test when the command fails.
func Rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := rabbitmqctl(args...)
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func rabbitmqctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w\n%s", err, out)
	}
	return string(out), nil
}

// Build compiles acemq-flow and the recorder plugin into dir and returns
// their paths. repo is the module's root.
func Build(repo, dir string) (binary, recorder string, err error) {
	binary, recorder = filepath.Join(dir, "acemq-flow"), filepath.Join(dir, "recorder")
	for _, b := range [][2]string{{binary, "./cmd/acemq-flow"}, {recorder, "./test/reliability/recorder"}} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", b[0], b[1])
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %w\n%s", b[1], err, out)
		}
	}
	return binary, recorder, nil
}

// FreeAddr returns a loopback address no one listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// RabbitmqctlErr runs rabbitmqctl with args and returns its output or
// error, for commands that may fail for a reason the test expects (a
// connection that closed by itself meanwhile).
func RabbitmqctlErr(args ...string) (string, error) { return rabbitmqctl(args...) }
