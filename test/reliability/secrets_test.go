//go:build chaos

package reliability

import (
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// asPostgres runs sql as the database's superuser (psql through su, the
// suite runs as root as CI does) on database test.
func asPostgres(t *testing.T, sql string) {
	t.Helper()
	out, err := exec.Command("su", "postgres", "-c", "psql -d test -v ON_ERROR_STOP=1 -tAq -c "+shellQuote(sql)).CombinedOutput()
	if err != nil {
		t.Fatalf("psql as postgres %s: %v\n%s", sql, err, out)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// statusPagePaths are the status page and the JSON it polls: they answer
// without the token, and must show no secret either.
var statusPagePaths = []string{"/", "/page/page.js", "/v1/flows", "/v1/schedules", "/v1/delays", "/v1/deadletters", "/v1/sagas"}

// TestChaosS23CanaryCredentials runs the runtime on credentials made for
// the test (a PostgreSQL role and a RabbitMQ user, each with a random
// 32-character password, and a random admin token) through the faults of
// S4, S9 and a store outage (its backends terminated), and through a start
// with wrong passwords; then searches everything an operator sees (the
// log with the plugins' stderr, the admin responses, /metrics, the status
// page and its JSON, the dead letters' headers, the failed start's output)
// for the secrets: 0.
func TestChaosS23CanaryCredentials(t *testing.T) {
	r := newRig(t, true)
	pgPass, amqpPass, token := "canaryPG"+harness.Random(12), "canaryMQ"+harness.Random(12), "canaryTK"+harness.Random(12)
	wrongPG, wrongMQ := "canaryXP"+harness.Random(12), "canaryXM"+harness.Random(12)
	secrets := []string{pgPass, amqpPass, token, wrongPG, wrongMQ}

	role := harness.Name(t) + "_role"
	asPostgres(t, fmt.Sprintf("CREATE ROLE %q LOGIN PASSWORD '%s'", role, pgPass))
	t.Cleanup(func() {
		_, _ = exec.Command("su", "postgres", "-c", "psql -d test -c "+shellQuote(fmt.Sprintf("DROP SCHEMA IF EXISTS %q CASCADE; DROP ROLE IF EXISTS %q", role, role))).CombinedOutput()
	})
	asPostgres(t, fmt.Sprintf("CREATE SCHEMA %q AUTHORIZATION %q", role, role))
	asPostgres(t, fmt.Sprintf("GRANT CONNECT ON DATABASE test TO %q", role))
	pg, _ := url.Parse(r.s.Postgres)
	pg.User = url.UserPassword(role, pgPass)
	q := pg.Query()
	q.Set("options", "-csearch_path="+role)
	pg.RawQuery = q.Encode()
	store := pg.String()

	user := harness.Name(t) + "_user"
	harness.Rabbitmqctl(t, "add_user", user, amqpPass)
	t.Cleanup(func() { _, _ = harness.RabbitmqctlErr("delete_user", user) })
	harness.Rabbitmqctl(t, "set_permissions", "-p", r.s.VHost, user, ".*", ".*", ".*")
	mq, _ := url.Parse(r.s.AMQP)
	mq.User = url.UserPassword(user, amqpPass)

	p := harness.StartRuntime(t, binary, mq.String(), "--store", store, "--create-schema", "--claim-timeout", "5s",
		"--admin-token", token, "--log-level", "debug", r.flow)
	p.Token = token
	wait := publishInBackground(t, r, plain("s23", load(3, 2000)))
	r.replies.WaitCount(20, time.Minute)
	faults := []string{}
	if closeRuntimeConnections(t, r.s.VHost) > 0 {
		faults = append(faults, "connections closed")
	}
	vh := url.PathEscape(r.s.VHost)
	management(t, r.s.AMQP, http.MethodDelete, "/api/bindings/"+vh+"/e/work/q/work.b/b", "")
	time.Sleep(500 * time.Millisecond) // the outage's length
	management(t, r.s.AMQP, http.MethodPost, "/api/bindings/"+vh+"/e/work/q/work.b", `{"routing_key":"b"}`)
	faults = append(faults, "binding removed")
	asPostgres(t, fmt.Sprintf("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '%s'", role))
	faults = append(faults, "store backends terminated")
	wait()

	// Starts on wrong passwords. The broker's refusal ends the run.
	badMQ := *mq
	badMQ.User = url.UserPassword(user, wrongMQ)
	out, err := harness.RunOnce(binary, time.Minute, "run", "--amqp", badMQ.String(), "--admin", "", "--management", "off", "--store", store, r.flow)
	if err == nil {
		t.Error("run with a wrong AMQP password exited 0")
	}
	seen := map[string]string{"failed start, wrong AMQP password": out}
	// PostgreSQL on this machine trusts loopback (pg_hba trust), so a wrong
	// store password is not refused: the run on it shows only whether the
	// password is kept out of what the runtime writes while it works.
	badPG := *pg
	badPG.User = url.UserPassword(role, wrongPG)
	p.Signal(syscall.SIGTERM)
	p.Wait(30 * time.Second)
	bad := harness.StartRuntime(t, binary, mq.String(), "--store", badPG.String(), "--management", "off", r.flow)
	if err := r.gen.Publish(0, harness.Message{ID: "s23-badstore-" + harness.Random(3), Exchange: "work", Key: "a", Body: `{"k":1}`}); err != nil {
		t.Fatal(err)
	}
	r.replies.WaitCount(r.replies.Len()+1, 20*time.Second)
	for _, path := range append([]string{"/healthz", "/readyz", "/v1/consumers"}, statusPagePaths...) {
		body, _, _ := bad.Get(path)
		seen["admin "+path+" of the runtime on a wrong store password"] = body
	}
	bad.Kill()
	seen["runtime on a wrong store password"] = bad.Log()
	p = harness.StartRuntime(t, binary, mq.String(), "--store", store, "--claim-timeout", "5s", "--admin-token", token, "--log-level", "debug", r.flow)
	p.Token = token
	v, dead, _ := r.finish(t, 2*time.Minute)

	seen["runtime log (plugin stderr included)"] = p.Log()
	for _, path := range append([]string{"/healthz", "/readyz", "/metrics", "/v1/consumers", "/v1/consumers/work.a"}, statusPagePaths...) {
		body, code, err := p.Get(path)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
		}
		if (path == "/metrics" || path == "/" || path == "/v1/flows") && code != http.StatusOK {
			t.Errorf("GET %s with the token: %d", path, code)
		}
		seen["admin "+path] = body
	}
	var headers strings.Builder
	for _, d := range dead {
		fmt.Fprintf(&headers, "%v\n", d.Headers)
	}
	seen["dead letters' headers"] = headers.String()

	leaks := 0
	for where, text := range seen {
		for _, s := range secrets {
			if n := strings.Count(text, s); n > 0 {
				leaks += n
				t.Errorf("a secret (%.8s…) appears %d times in the %s", s, n, where)
			}
		}
	}
	harness.Record(t, harness.Row{Scenario: "S23 canary credentials", Faults: strings.Join(faults, ", ") + ", 2 runs on wrong passwords", Verdict: v,
		Notes: fmt.Sprintf("%d occurrences of 5 secrets in %d places searched (logs with plugin stderr, 5 admin responses, the status page and its 5 JSON reads, dead letters, 2 runs on wrong passwords); PostgreSQL here trusts loopback, so the wrong store password is not refused", leaks, len(seen))})
}
