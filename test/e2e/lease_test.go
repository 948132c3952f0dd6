package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

const leaseFlow = `version: acemq.flow/v1
name: e2e
plugins:
  testkit: {command: TESTKIT}
consumers:
  - id: charge
    queue: lease.charge
    handler: testkit.sleep
    idempotent: true
    declare: {type: quorum}
`

// TestAClaimHeldByAKilledHandlerBlocksThenIsTakenOver kills the runtime
// while an idempotent handler holds a claim (on PostgreSQL). The
// redelivered message is in progress, not a duplicate: it comes round
// through the 1s rung until the lease expires, then is taken over and
// completes — once.
func TestAClaimHeldByAKilledHandlerBlocksThenIsTakenOver(t *testing.T) {
	url := testenv.VHost(t)
	store := testenv.PostgresSchema(t)
	flow := writeFlow(t, leaseFlow)
	addr := testenv.FreeAddr(t)
	args := []string{"--store", store, "--create-schema", "--claim-timeout", "8s", "--admin", addr, flow}
	p := startRuntime(t, url, args...)
	ch := dial(t, url)
	res := consumeResults(t, ch, "results")
	ids := publishN(t, dial(t, url), "", "lease.charge", "results", 1, `{"ms": 4000}`)
	testenv.Eventually(t, 20*time.Second, func() error {
		resp, err := http.Get("http://" + addr + "/v1/consumers/charge")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var st struct {
			InFlight int `json:"in_flight"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.InFlight != 1 {
			return testenv.Errorf("consumer charge has %d in flight (%v), want the one being handled", st.InFlight, err)
		}
		return nil
	})
	// In flight is counted before the claim is taken: wait for the claim
	// itself, so that the kill leaves it held.
	testenv.Eventually(t, 20*time.Second, func() error {
		if n := testenv.PSQL(t, store, "SELECT count(*) FROM acemq_idempotency WHERE state = 'claimed'"); n != "1" {
			return testenv.Errorf("%s claims held, want 1", n)
		}
		return nil
	})
	killedAt := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.wait(t, 30*time.Second)

	q := startRuntime(t, url, args...)
	if !q.waitLog(t, `msg="delivery settled" flow=e2e consumer=charge queue=lease.charge outcome=in_progress`, 30*time.Second) {
		t.Fatalf("the redelivered message was not seen as in progress; log:\n%s", tail(q.output(), 30))
	}
	res.until(t, ids, 60*time.Second, nil)
	if since := time.Since(killedAt); since < 8*time.Second {
		t.Errorf("the message completed %s after the kill, before the 8s lease could expire", since)
	}
	if strings.Contains(q.output(), `outcome=duplicate`) {
		t.Errorf("the in-progress message was acknowledged as a duplicate:\n%s", tail(q.output(), 30))
	}
	if res.seen[ids[0]] != "completed" {
		t.Errorf("the run ended %q, want completed", res.seen[ids[0]])
	}
}
