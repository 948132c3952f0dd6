// Package tls tests acemq-flow against the local RabbitMQ and PostgreSQL
// over TLS, with a CA the test makes: each service is reached through a
// TLS listener on another port (testenv.StartTLSProxy, which asks for a
// client certificate), so that what the client checks is tested without
// reconfiguring the services the other tests share. When `make services`
// has configured the services' own TLS listeners, ACEMQ_TEST_AMQPS_URL and
// ACEMQ_TEST_POSTGRES_TLS_URL name them, and the same commands run there.
package tls

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/test/testenv"
)

// sslRequest answers PostgreSQL's SSLRequest ('S': go ahead with TLS), as
// a server with ssl = on does before the handshake.
func sslRequest(c net.Conn) error {
	var msg [8]byte
	if _, err := io.ReadFull(c, msg[:]); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(msg[:4]) != 8 || binary.BigEndian.Uint32(msg[4:]) != 80877103 {
		return errors.New("not an SSLRequest")
	}
	_, err := c.Write([]byte{'S'})
	return err
}

// postgresVia returns the test's PostgreSQL URL (its own schema) at host
// and the proxy's port, with the TLS parameters kv.
func postgresVia(t *testing.T, raw, host string, px *testenv.TLSProxy, kv ...string) string {
	t.Helper()
	_, port, _ := net.SplitHostPort(px.Addr)
	return postgresAt(t, raw, net.JoinHostPort(host, port), kv...)
}

// postgresAt returns raw at hostPort with the TLS parameters kv.
func postgresAt(t *testing.T, raw, hostPort string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = hostPort
	q := u.Query()
	q.Del("sslmode")
	for i := 0; i < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func TestPostgresVerifyFull(t *testing.T) {
	raw := testenv.PostgresSchema(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewPKI(t)
	px := testenv.StartTLSProxy(t, p, u.Host, sslRequest)
	full := []string{"sslmode", "verify-full", "sslrootcert", p.CAFile, "sslcert", p.ClientCertFile, "sslkey", p.ClientKeyFile}

	t.Run("the CA, a client certificate and the certificate's name connect", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		s, err := postgres.Open(ctx, postgresVia(t, raw, "localhost", px, full...), stores.Options{})
		if err != nil {
			t.Fatalf("open the store over TLS: %v", err)
		}
		defer s.Close()
		var ssl bool
		if err := s.Pool().QueryRow(ctx, "SELECT 1 = 1").Scan(&ssl); err != nil || !ssl {
			t.Fatalf("a query over TLS: %v", err)
		}
		if got := px.Clients(); len(got) == 0 || got[0] != "acemq-flow-client" {
			t.Errorf("the TLS listener saw client certificates %q, want acemq-flow-client", got)
		}
	})

	refused := []struct {
		name, url, want string
	}{
		{"without the CA", postgresVia(t, raw, "localhost", px, "sslmode", "verify-full", "sslcert", p.ClientCertFile, "sslkey", p.ClientKeyFile), "unknown authority"},
		{"with another CA", postgresVia(t, raw, "localhost", px, "sslmode", "verify-full", "sslrootcert", p.OtherCAFile, "sslcert", p.ClientCertFile, "sslkey", p.ClientKeyFile), "unknown authority"},
		{"by a name the certificate does not hold", postgresVia(t, raw, "127.0.0.1", px, full...), "127.0.0.1"},
		{"without a client certificate", postgresVia(t, raw, "localhost", px, "sslmode", "verify-full", "sslrootcert", p.CAFile), "certificate required"},
		{"with a client certificate of another CA", postgresVia(t, raw, "localhost", px, "sslmode", "verify-full", "sslrootcert", p.CAFile, "sslcert", p.OtherClientCert, "sslkey", p.OtherClientKey), "certificate required"},
		// PostgreSQL's own port: without TLS (ssl = off), or with a
		// certificate of its own (Debian's snakeoil), never of this CA;
		// verify-full falls back to nothing.
		{"by the server's own port, with no certificate of this CA", postgresAt(t, raw, net.JoinHostPort("localhost", u.Port()), full...), "tls"},
	}
	for _, tc := range refused {
		t.Run("refused "+tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			s, err := postgres.Open(ctx, tc.url, stores.Options{})
			if err == nil {
				err = s.Pool().Ping(ctx)
				s.Close()
			}
			if err == nil {
				t.Fatalf("connected %s", tc.name)
			}
			if pw, _ := u.User.Password(); pw != "" && strings.Contains(err.Error(), ":"+pw+"@") {
				t.Errorf("the error shows the password: %v", err)
			}
			if !strings.Contains(strings.ToLower(err.Error()), tc.want) {
				t.Errorf("refused %s: %v\nwant it to say %q", tc.name, err, tc.want)
			}
		})
	}
}

// buildCLI builds acemq-flow once per test binary.
var cli struct {
	path string
	err  error
}

func acemqFlow(t *testing.T) string {
	t.Helper()
	if cli.path == "" && cli.err == nil {
		dir, err := os.MkdirTemp("", "acemq-tls-")
		if err != nil {
			t.Fatal(err)
		}
		cli.path = filepath.Join(dir, "acemq-flow")
		build := exec.Command("go", "build", "-o", cli.path, "./cmd/acemq-flow")
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			cli.err = errors.New(string(out))
		}
	}
	if cli.err != nil {
		t.Fatalf("go build ./cmd/acemq-flow: %v", cli.err)
	}
	return cli.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cli.path != "" {
		os.RemoveAll(filepath.Dir(cli.path))
	}
	os.Exit(code)
}

// TestCommandsOverTLS runs acemq-flow's commands with an amqps:// broker
// URL and a verify-full store URL, as an operator writes them: migrate
// creates the store's tables over TLS, delays reads the broker over TLS;
// without the CA, each says what to give.
func TestCommandsOverTLS(t *testing.T) {
	bin := acemqFlow(t)
	pg := testenv.PostgresSchema(t)
	pu, _ := url.Parse(pg)
	au, err := url.Parse(testenv.VHost(t))
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewPKI(t)
	pgProxy := testenv.StartTLSProxy(t, p, pu.Host, sslRequest)
	amqpProxy := testenv.StartTLSProxy(t, p, au.Host, nil)
	store := postgresVia(t, pg, "localhost", pgProxy, "sslmode", "verify-full", "sslrootcert", p.CAFile, "sslcert", p.ClientCertFile, "sslkey", p.ClientKeyFile)
	_, aport, _ := net.SplitHostPort(amqpProxy.Addr)
	tlsQuery := url.Values{"cacertfile": {p.CAFile}, "certfile": {p.ClientCertFile}, "keyfile": {p.ClientKeyFile}}
	amqps := "amqps://" + au.User.String() + "@localhost:" + aport + au.EscapedPath() + "?" + tlsQuery.Encode()

	run := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "ACEMQ_AMQP_URL=", "ACEMQ_STORE_URL=")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("acemq-flow %s: %v", args[0], err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}

	if out, code := run(t, "migrate", "--store", store); code != 0 || !strings.Contains(out, "is up to date") {
		t.Fatalf("migrate --store <verify-full>: exit %d\n%s", code, out)
	}
	if out, code := run(t, "outbox", "list", "--store", store); code != 0 {
		t.Errorf("outbox list --store <verify-full>: exit %d\n%s", code, out)
	}
	ch := testenv.ConfirmedChannel(t, au.String())
	if _, err := ch.QueueDeclare("tls-inspected", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "inspect", "tls-inspected", "--amqp", amqps, "--limit", "0", "--format", "json"); code != 0 || !strings.Contains(out, "tls-inspected") {
		t.Errorf("inspect --amqp amqps://…: exit %d\n%s", code, out)
	}
	if len(amqpProxy.Clients()) == 0 || len(pgProxy.Clients()) == 0 {
		t.Errorf("the TLS listeners saw %d broker and %d store connections, want some of each", len(amqpProxy.Clients()), len(pgProxy.Clients()))
	}

	noCA := strings.Replace(amqps, "cacertfile="+url.QueryEscape(p.CAFile)+"&", "", 1)
	out, code := run(t, "delays", "--amqp", noCA)
	if code != 1 || !strings.Contains(out, "cacertfile=PATH") {
		t.Errorf("delays with an amqps URL lacking the CA: exit %d, want 1 saying to give cacertfile\n%s", code, out)
	}
	if pw, _ := au.User.Password(); pw != "" && strings.Contains(out, ":"+pw+"@") {
		t.Errorf("delays shows the broker password:\n%s", out)
	}
}

// TestServicesOwnTLSListeners runs against the TLS listeners make services
// configures (rabbitmq.conf listeners.ssl.default, PostgreSQL ssl = on),
// when it has: their CA and client certificate are in ACEMQ_TEST_TLS_DIR.
func TestServicesOwnTLSListeners(t *testing.T) {
	amqps, pg, dir := os.Getenv("ACEMQ_TEST_AMQPS_URL"), os.Getenv("ACEMQ_TEST_POSTGRES_TLS_URL"), os.Getenv("ACEMQ_TEST_TLS_DIR")
	if amqps == "" || pg == "" || dir == "" {
		t.Skip("ACEMQ_TEST_AMQPS_URL, ACEMQ_TEST_POSTGRES_TLS_URL and ACEMQ_TEST_TLS_DIR are unset: make services configures the listeners, make test sets them")
	}
	bin := acemqFlow(t)
	q := url.Values{"cacertfile": {filepath.Join(dir, "ca.pem")}, "certfile": {filepath.Join(dir, "client.pem")}, "keyfile": {filepath.Join(dir, "client-key.pem")}}
	amqpsURL := amqps + "?" + q.Encode()
	pq := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {filepath.Join(dir, "ca.pem")}, "sslcert": {filepath.Join(dir, "client.pem")}, "sslkey": {filepath.Join(dir, "client-key.pem")}}
	pgURL := pg + "?" + pq.Encode()
	// delays names the ladder missing or shows it: either way it spoke to
	// the broker, which a TLS failure would have stopped first.
	if out, err := exec.Command(bin, "delays", "--amqp", amqpsURL).CombinedOutput(); err != nil && !strings.Contains(string(out), "the delay ladder is not declared") {
		t.Errorf("acemq-flow delays over RabbitMQ's TLS listener: %v\n%s", err, out)
	}
	// The listener asks for a client certificate (fail_if_no_peer_cert).
	noCert := amqps + "?" + url.Values{"cacertfile": {filepath.Join(dir, "ca.pem")}}.Encode()
	if out, err := exec.Command(bin, "delays", "--amqp", noCert).CombinedOutput(); err == nil || !strings.Contains(string(out), "certfile=PATH&keyfile=PATH") {
		t.Errorf("delays without a client certificate: %v; want a refusal naming certfile and keyfile\n%s", err, out)
	}
	// The broker's certificate is checked: another CA refuses it.
	other := testenv.NewPKI(t)
	otherCA := amqps + "?" + url.Values{"cacertfile": {other.CAFile}, "certfile": {filepath.Join(dir, "client.pem")}, "keyfile": {filepath.Join(dir, "client-key.pem")}}.Encode()
	if out, err := exec.Command(bin, "delays", "--amqp", otherCA).CombinedOutput(); err == nil || !strings.Contains(string(out), "not signed by a CA this connection trusts") {
		t.Errorf("delays trusting another CA: %v; want a refusal of the broker's certificate\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, pgURL, stores.Options{})
	if err != nil {
		t.Fatalf("open the store over PostgreSQL's TLS: %v", err)
	}
	defer s.Close()
	var on, dn string
	if err := s.Pool().QueryRow(ctx, "SELECT ssl::text, coalesce(client_dn, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&on, &dn); err != nil || on != "true" || !strings.Contains(dn, "acemq-flow-client") {
		t.Errorf("pg_stat_ssl for this connection: ssl %q, client %q, %v; want TLS with the client certificate", on, dn, err)
	}
}
