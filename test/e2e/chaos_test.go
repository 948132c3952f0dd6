//go:build chaos

package e2e

import (
	"flag"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

var soak = flag.Duration("soak", 10*time.Minute, "how long TestChaosSoak injects faults")

// TestChaosSoak runs a three-step pipeline under a steady load while faults
// are injected at random (seeded, printed): every runtime connection
// force-closed, a plugin process killed, the runtime killed with -9 and
// restarted. At the end every message sent must have completed: nothing
// lost. Duplicates are allowed (at-least-once) and reported.
func TestChaosSoak(t *testing.T) {
	url := testenv.VHost(t)
	vhost := testenv.VHostOf(url)
	d := *soak
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ACEMQ_CHAOS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set ACEMQ_CHAOS_SEED to replay), duration %s", seed, d)
	rng := rand.New(rand.NewPCG(seed, seed))
	flow := writeFlow(t, threeSteps)
	p := startRuntime(t, url, flow)
	res := consumeResults(t, dial(t, url), "results")
	pub := dial(t, url)

	var ids []string
	faults := map[string]int{}
	end := time.Now().Add(d)
	next := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		ids = append(ids, publishN(t, pub, "hops", "a", "results", 50, `{"k":1}`)...)
		time.Sleep(100 * time.Millisecond) // the load's pace, not a wait for an outcome
		if time.Now().Before(next) {
			continue
		}
		next = time.Now().Add(time.Duration(2+rng.IntN(5)) * time.Second)
		switch rng.IntN(3) {
		case 0:
			faults["connections closed"]++
			testenv.CloseConnections(t, vhost, "acemq-flow")
		case 1:
			if pids := pluginProcesses(t); len(pids) > 0 {
				faults["plugin killed"]++
				_ = syscall.Kill(pids[rng.IntN(len(pids))], syscall.SIGKILL)
			}
		case 2:
			faults["runtime killed -9"]++
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			_ = p.wait(t, 30*time.Second)
			p = startRuntime(t, url, flow)
		}
	}
	t.Logf("faults: %v; %d messages sent", faults, len(ids))
	res.until(t, ids, 5*time.Minute, nil)
	t.Logf("lost 0 of %d; %d duplicate completions (at-least-once)", len(ids), res.dups)
}
