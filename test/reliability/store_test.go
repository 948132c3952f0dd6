//go:build chaos

package reliability

import (
	"fmt"
	"net/url"
	"os/exec"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// storeRole creates a PostgreSQL role of the test's own with a schema it
// owns, so that its backends can be told from every other test's, and
// returns the store URL logging in as it (dropped in t.Cleanup).
func storeRole(t *testing.T, base string) (store, role string) {
	t.Helper()
	role = harness.Name(t) + "_role"
	pass := harness.Random(16)
	asPostgres(t, fmt.Sprintf("CREATE ROLE %q LOGIN PASSWORD '%s'", role, pass))
	t.Cleanup(func() {
		_, _ = exec.Command("su", "postgres", "-c", "psql -d test -c "+shellQuote(fmt.Sprintf("DROP SCHEMA IF EXISTS %q CASCADE; DROP ROLE IF EXISTS %q", role, role))).CombinedOutput()
	})
	asPostgres(t, fmt.Sprintf("CREATE SCHEMA %q AUTHORIZATION %q", role, role))
	asPostgres(t, fmt.Sprintf("GRANT CONNECT ON DATABASE test TO %q", role))
	u, _ := url.Parse(base)
	u.User = url.UserPassword(role, pass)
	q := u.Query()
	q.Set("options", "-csearch_path="+role)
	u.RawQuery = q.Encode()
	return u.String(), role
}

// TestChaosS11StoreConnectionsKilled terminates every backend of the
// runtime's store role every 2 s under load (pg_terminate_backend, the
// shared database's other sessions untouched): each affected message is
// handled again, nothing is lost, nothing is done twice, no claim is left
// held once drained (a confirm or release that met a terminated backend is
// tried again within its lease), and no attempt is spent on the store's
// failures (an outage holds the delivery and pauses the consumers).
func TestChaosS11StoreConnectionsKilled(t *testing.T) {
	notStar(t)
	r := newRig(t, true)
	store, role := storeRole(t, r.s.Postgres)
	p := harness.StartRuntime(t, binary, r.s.AMQP, "--store", store, "--create-schema", "--claim-timeout", "5s", r.flow)
	wait := publishInBackground(t, r, plain("s11", load(10, 5000)))
	r.replies.WaitCount(50, time.Minute)
	kills := 0
	for range 5 {
		asPostgres(t, fmt.Sprintf("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '%s'", role))
		kills++
		time.Sleep(2 * time.Second) // the plan's spacing between terminations
	}
	wait()
	v, _, _ := r.finish(t, 2*time.Minute)
	if held := heldClaims(t, store); held != "0" {
		t.Errorf("%s idempotency claims left claimed, not confirmed, after the drain, want 0: a confirm that met a terminated backend must be tried again within its lease", held)
	}
	if v.DupEffects != 0 {
		t.Errorf("dup_effects = %d, want 0: the store's connections were killed, not the runtime", v.DupEffects)
	}
	retried, held := p.Count(`msg="delivery retried"`), heldDeliveries(p)
	if retried != 0 {
		t.Errorf("%d deliveries retried, want 0: an outage of the store must not spend the message's attempts", retried)
	}
	if v.DeadLettered != 0 {
		t.Errorf("%d runs dead-lettered, want 0", v.DeadLettered)
	}
	harness.Record(t, harness.Row{Scenario: "S11 store backends killed", Faults: fmt.Sprintf("%d× pg_terminate_backend of the store role", kills), Verdict: v,
		Notes: fmt.Sprintf("0 claims left held; %d deliveries held (no attempt spent), %d retried; store outages logged %d×", held, retried, p.Count(`msg="store unavailable`))})
}

// heldDeliveries is how many deliveries the runtime held while a store was
// unavailable (acemq_messages_total{outcome="held"}, both steps).
func heldDeliveries(p *harness.Runtime) int {
	n := 0
	for _, c := range []string{"work.a", "work.b"} {
		v, _ := p.Metric(`acemq_messages_total{consumer="` + c + `",outcome="held"}`)
		n += int(v)
	}
	return n
}
