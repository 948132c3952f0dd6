//go:build chaos

package reliability

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// clusterRig is rig on the private cluster: the flow, the store and the
// ledger as newRig makes them, the vhost on the cluster, a reply queue
// that is a quorum queue, and a generator and a collector that follow
// their URLs when a node goes.
type clusterRig struct {
	s       *harness.Services
	ledger  *harness.Ledger
	flow    string
	store   string
	replies *harness.Replies
	gen     *harness.FailoverGenerator
	procs   []*harness.Runtime
}

// newClusterRig sets the rig up; the generator publishes to the nodes
// numbered genNodes (0-based; every node when none), the collector reads
// from every node.
func newClusterRig(t *testing.T, genNodes ...int) *clusterRig {
	t.Helper()
	s := harness.ClusterEnv(t)
	r := &clusterRig{s: s, ledger: harness.OpenLedger(t, s.Ledger), store: harness.Schema(t, s.Postgres, "store")}
	body := strings.NewReplacer("@RECORDER@", recorder, "@LEDGER@", s.Ledger, "@IDEMPOTENT@", "true").Replace(flowTemplate)
	r.flow = filepath.Join(t.TempDir(), "rel.yaml")
	if err := os.WriteFile(r.flow, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r.replies = harness.CollectFrom(t, rotate(s.URLs, 1), replyQueue)
	genURLs := s.URLs
	if len(genNodes) > 0 {
		genURLs = nil
		for _, i := range genNodes {
			genURLs = append(genURLs, s.URLs[i])
		}
	}
	r.gen = harness.NewFailoverGenerator(t, genURLs, replyQueue)
	// ACEMQ_CHAOS_LOGS=DIR keeps every runtime's log there, to read what a
	// replica did around a fault.
	if dir := os.Getenv("ACEMQ_CHAOS_LOGS"); dir != "" {
		t.Cleanup(func() {
			for i, p := range r.procs {
				path := filepath.Join(dir, fmt.Sprintf("%s-runtime-%d.log", t.Name(), i+1))
				if err := os.WriteFile(path, []byte(p.Log()), 0o644); err != nil {
					t.Logf("keeping the log: %v", err)
				}
			}
		})
	}
	return r
}

// start runs a runtime given urls, in that order.
func (r *clusterRig) start(t *testing.T, urls []string) *harness.Runtime {
	t.Helper()
	p := harness.StartRuntime(t, binary, strings.Join(urls, ","), "--store", r.store, "--create-schema", "--claim-timeout", "5s", "--drain-timeout", "10s", r.flow)
	r.procs = append(r.procs, p)
	return p
}

// publishUntil publishes healthy runs in the background at rate() (a
// quarter of it under -short), in chunks of half a second, until the
// returned stop is called and at least least were sent: the load spans
// every fault, however long the nodes take to stop and start (minutes on
// two busy cores). stop waits for the generator's last confirms.
func (r *clusterRig) publishUntil(t *testing.T, prefix string, least int) (stop func()) {
	t.Helper()
	quit := make(chan struct{})
	done := make(chan error, 1)
	rate := size(max(20, rate()/4), rate())
	go func() {
		per := max(1, rate/2)
		for i, sent := 0, 0; ; i++ {
			select {
			case <-quit:
				if sent >= least {
					done <- nil
					return
				}
			default:
			}
			if err := r.gen.Publish(rate, plain(fmt.Sprintf("%s.%d", prefix, i), per)...); err != nil {
				done <- err
				return
			}
			sent += per
		}
	}()
	return func() {
		t.Helper()
		close(quit)
		if err := <-done; err != nil {
			t.Errorf("generator: %v", err)
		}
	}
}

// finish drains, reads the dead letters and checks: nothing lost, nothing
// unexpected, and no run dead-lettered but those of poison (each of which
// must be, fatal, in its step's .dlq or .parked). It returns the verdict
// and where the poison runs ended, by queue.
func (r *clusterRig) finish(t *testing.T, d time.Duration, poison []string) (harness.Verdict, map[string]int) {
	t.Helper()
	node := harness.Running(t, harness.ClusterNodes).Name
	if left := harness.DrainOn(t, node, r.replies, r.s.VHost, replyQueue, r.gen.Sent.IDs(harness.OK), d); left != "" {
		t.Errorf("not drained: %s", left)
		// A wedged runtime: its goroutines go to its log (SIGQUIT), which
		// ACEMQ_CHAOS_LOGS keeps.
		for _, p := range r.procs {
			p.Signal(syscall.SIGQUIT)
			p.Wait(30 * time.Second)
		}
	}
	dead := harness.DeadLettersOn(t, node, r.s.AMQP, r.s.VHost)
	v := harness.Check(t, r.gen.Sent, r.replies, dead, r.ledger)
	// Nothing else sent here fails: any other dead letter is a healthy run
	// the fault spent.
	want := set(poison)
	where := map[string]int{}
	reasons := map[string]int{}
	for _, dl := range dead {
		if want[dl.Run] && dl.Kind == "fatal" {
			where[dl.Queue]++
			delete(want, dl.Run)
			continue
		}
		reasons[fmt.Sprintf("%s %s attempt %d: %s", dl.Queue, dl.Kind, dl.Attempt, dl.Error)]++
	}
	if len(reasons) > 0 {
		t.Errorf("healthy runs dead-lettered, by reason: %v", reasons)
	}
	if len(want) > 0 {
		t.Errorf("%d of %d poison runs are in no .dlq or .parked: %v", len(want), len(poison), first(slices.Sorted(maps.Keys(want)), 5))
	}
	if len(v.Lost) > 0 {
		t.Errorf("lost %d runs the broker confirmed, e.g. %v", len(v.Lost), first(v.Lost, 5))
	}
	if len(v.Unexpected) > 0 {
		t.Errorf("%d runs completed that were never sent, e.g. %v", len(v.Unexpected), first(v.Unexpected, 5))
	}
	return v, where
}

func set(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// clock logs each phase of a scenario with the time since it began.
type clock struct {
	t     *testing.T
	start time.Time
}

func (c clock) phase(format string, args ...any) {
	c.t.Helper()
	c.t.Logf("%5.1fs %s", time.Since(c.start).Seconds(), fmt.Sprintf(format, args...))
}

func rotate(s []string, n int) []string {
	return append(slices.Clone(s[n:]), s[:n]...)
}

// status is what a runtime's GET /v1/status says.
type status struct {
	Ready       bool `json:"ready"`
	Connections []struct {
		Name  string `json:"name"`
		State string `json:"state"`
		Node  string `json:"node"`
	} `json:"connections"`
}

func statusOf(p *harness.Runtime) (status, error) {
	body, code, err := p.Get("/v1/status")
	if err != nil {
		return status{}, err
	}
	if code != 200 {
		return status{}, fmt.Errorf("/v1/status answered %d: %s", code, body)
	}
	var st status
	err = json.Unmarshal([]byte(body), &st)
	return st, err
}

// nodes returns the nodes the runtime's connections are on, sorted and
// unique, as "127.0.0.1:5681,…".
func (st status) nodes() string {
	var ns []string
	for _, c := range st.Connections {
		if !slices.Contains(ns, c.Node) {
			ns = append(ns, c.Node)
		}
	}
	slices.Sort(ns)
	return strings.Join(ns, ",")
}

// readyWatch polls the replicas' /readyz and /v1/status until stopped and
// counts the lies: /readyz ready while a connection is on a node that has
// been stopped for more than a second (time for the runtime to read the
// broker's close, which stop_app sends before it returns).
type readyWatch struct {
	mu      sync.Mutex
	down    map[string]time.Time // node address → when it was stopped
	lies    []string
	samples int
	unready map[int]int // replica → samples not ready
	stop    chan struct{}
	done    chan struct{}
}

func watchReady(reps []*harness.Runtime) *readyWatch {
	w := &readyWatch{down: map[string]time.Time{}, unready: map[int]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(200 * time.Millisecond): // /readyz is polled; it has no event
			}
			for i, p := range reps {
				_, code, err := p.Get("/readyz")
				st, serr := statusOf(p)
				if err != nil || serr != nil {
					continue
				}
				w.mu.Lock()
				w.samples++
				if code != 200 {
					w.unready[i]++
				}
				for _, c := range st.Connections {
					if at, ok := w.down[c.Node]; ok && code == 200 && time.Since(at) > time.Second {
						w.lies = append(w.lies, fmt.Sprintf("replica %d ready with connection %q %s on %s, stopped %s before", i+1, c.Name, c.State, c.Node, time.Since(at).Round(time.Millisecond)))
					}
				}
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *readyWatch) nodeDown(n harness.Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.down[n.AMQP] = time.Now()
}

func (w *readyWatch) nodeUp(n harness.Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.down, n.AMQP)
}

func (w *readyWatch) close() (lies []string, samples int) {
	close(w.stop)
	<-w.done
	return w.lies, w.samples
}

// waitOff waits until every replica is ready with no connection on node,
// and returns how long that took, or fails the test after a minute.
func waitOff(t *testing.T, reps []*harness.Runtime, node harness.Node) time.Duration {
	t.Helper()
	at := time.Now()
	for time.Since(at) < time.Minute {
		off := 0
		for _, p := range reps {
			st, err := statusOf(p)
			if err == nil && st.Ready && !strings.Contains(st.nodes(), node.AMQP) && len(st.Connections) == 2 {
				off++
			}
		}
		if off == len(reps) {
			return time.Since(at)
		}
		time.Sleep(100 * time.Millisecond) // as above
	}
	var states []string
	for i, p := range reps {
		st, err := statusOf(p)
		states = append(states, fmt.Sprintf("replica %d: %+v %v", i+1, st, err))
	}
	t.Fatalf("a minute after %s stopped, not every replica is ready on another node: %s", node.Name, strings.Join(states, "; "))
	return 0
}

// TestChaosS26ClusterScaleOut runs two runtime replicas on the private
// three-node cluster, each given every node's URL (in different orders),
// under load. It stops one node (not the leader of the first step's
// queue, and one a replica is on), brings it back, then stops the
// leader of that queue, and brings it back: the quorum queues are
// replicated over the three nodes, the replicas follow their URL lists,
// /readyz never says ready while a connection is on a stopped node, and
// nothing is lost. While each node is down a few poison runs (fatal at
// step a) are sent: each ends in work.a's .dlq or .parked, classic queues
// on one node, which may be the one stopped (their dead-lettering is then
// held until it is back), and no healthy run is dead-lettered.
func TestChaosS26ClusterScaleOut(t *testing.T) {
	shortIfNamed(t)
	clk := clock{t, time.Now()}
	r := newClusterRig(t)
	restoreCluster(t)
	nodes := harness.ClusterNodes
	reps := []*harness.Runtime{r.start(t, r.s.URLs), r.start(t, rotate(r.s.URLs, 1))}
	for _, q := range []string{"work.a", "work.b"} {
		members := harness.Members(t, nodes[0], r.s.VHost, q)
		for _, n := range nodes {
			if !strings.Contains(members, n.Name) {
				t.Errorf("quorum queue %s has members %s, want all three nodes", q, members)
			}
		}
	}
	clk.phase("2 replicas started, work.a and work.b on 3 nodes")
	stop := r.publishUntil(t, "s26", size(500, 8000))
	r.replies.WaitCount(50, time.Minute)
	watch := watchReady(reps)
	clk.phase("under load")

	var faults, poison []string
	var worst time.Duration
	fault := func(victim harness.Node, why string) {
		t.Helper()
		victim.StopApp(t)
		watch.nodeDown(victim)
		clk.phase("%s stopped (%s)", victim.Short(), why)
		follow := waitOff(t, reps, victim)
		worst = max(worst, follow)
		seen := r.replies.Len()
		clk.phase("every replica ready on the other nodes")
		bad := harness.Messages("s26-poison-"+victim.Short()+"-"+harness.Random(3), "work", "a", `{"fatal":true}`, 5)
		if err := r.gen.Publish(0, bad...); err != nil {
			t.Errorf("poison: %v", err)
		}
		for _, m := range bad {
			poison = append(poison, m.ID)
		}
		// The work goes on without the node.
		if !r.replies.WaitCount(seen+50, time.Minute) {
			t.Errorf("with %s stopped, %d runs replied in a minute, want progress", victim.Name, r.replies.Len()-seen)
		}
		clk.phase("%d runs replied while %s was down", r.replies.Len()-seen, victim.Short())
		victim.StartApp(t)
		watch.nodeUp(victim)
		clk.phase("%s started", victim.Short())
		faults = append(faults, fmt.Sprintf("stop_app %s (%s), replicas ready elsewhere after %.1fs", victim.Short(), why, follow.Seconds()))
	}

	leader, ok := harness.Leader(t, nodes[0], r.s.VHost, "work.a")
	if !ok {
		t.Fatalf("no leader listed for work.a")
	}
	// First a node that leads nothing of work.a, one a replica is on.
	st, _ := statusOf(reps[1])
	victim := nodes[1]
	for _, n := range nodes {
		if n != leader && strings.Contains(st.nodes(), n.AMQP) {
			victim = n
		}
	}
	if victim == leader {
		victim = nodes[2]
	}
	fault(victim, "a replica's node, not work.a's leader")

	leader, ok = harness.Leader(t, harness.Running(t, nodes), r.s.VHost, "work.a")
	if !ok {
		t.Fatalf("no leader listed for work.a")
	}
	fault(leader, "work.a's leader")
	if next, ok := harness.Leader(t, harness.Running(t, nodes), r.s.VHost, "work.a"); ok {
		t.Logf("work.a led by %s after %s was stopped and started", next.Name, leader.Name)
	}

	// A replica started while the node holding work.a's .dlq and .parked
	// (classic queues: one node each) is down starts on the other nodes,
	// taking those queues as they are, and works.
	home, ok := harness.Home(t, harness.Running(t, nodes), r.s.VHost, "work.a.dlq")
	if !ok {
		t.Fatalf("no home node listed for work.a.dlq")
	}
	home.StopApp(t)
	watch.nodeDown(home)
	clk.phase("%s stopped (the home of work.a.dlq)", home.Short())
	waitOff(t, reps, home)
	late := r.start(t, rotate(r.s.URLs, 2))
	lateUp := waitOff(t, []*harness.Runtime{late}, home)
	if n := late.Count(`msg="queue's home node is down; it is taken as it is`); n < 2 {
		t.Errorf("the replica started with %s down logged %d queues taken as they are, want work.a's .dlq and .parked at least", home.Short(), n)
	}
	seen := r.replies.Len()
	if !r.replies.WaitCount(seen+50, time.Minute) {
		t.Errorf("with %s stopped and a third replica started, %d runs replied in a minute, want progress", home.Name, r.replies.Len()-seen)
	}
	clk.phase("a third replica started and ready %.1fs after its start; %d runs replied", lateUp.Seconds(), r.replies.Len()-seen)
	home.StartApp(t)
	watch.nodeUp(home)
	clk.phase("%s started", home.Short())
	faults = append(faults, fmt.Sprintf("stop_app %s (the home of work.a's classic .dlq and .parked), a third replica started meanwhile, ready on the other nodes", home.Short()))

	stop()
	clk.phase("%d sent", r.gen.Sent.Len())
	v, where := r.finish(t, 3*time.Minute, poison)
	clk.phase("drained and checked")
	lies, samples := watch.close()
	for _, l := range first(lies, 5) {
		t.Errorf("/readyz lied: %s", l)
	}
	var follows []string
	refused := 0
	for i, p := range reps {
		follows = append(follows, strconv.Itoa(p.Count(`msg="connection re-established on another node"`)))
		refused += p.Count(nackedLine)
		if strings.Contains(p.Log(), "guest:guest") {
			t.Errorf("replica %d logged a password", i+1)
		}
	}
	harness.Record(t, harness.Row{Scenario: "S26 cluster scale-out, 2 replicas × 3 nodes", Faults: strings.Join(faults, "; "), Verdict: v,
		Recovery: fmt.Sprintf("%.1fs worst to ready on another node", worst.Seconds()),
		Notes: fmt.Sprintf("quorum queues on 3 nodes; moves to another node per replica %s; /readyz sampled %d times, %d lies; %d poison runs sent during the outages, dead-lettered in %v; %d deliveries whose result the broker nacked, held and published again; generator redialled %d×, republished %d",
			strings.Join(follows, "/"), samples, len(lies), len(poison), where, refused, r.gen.Redials(), r.gen.Republished())})
}

// TestChaosS5NodeRestart restarts the node a runtime is given (alone)
// under load, twice: stop_app then start_app, then kill -9 of its Erlang
// VM and a start. The generator publishes to that node too, retrying
// every 500 ms. The runtime is not ready while the node is down, ready
// again within its redial backoff's cap (10 s) and a dial of await_startup, and
// nothing confirmed is lost; messages whose confirm the restart swallowed
// are republished with their id.
func TestChaosS5NodeRestart(t *testing.T) {
	shortIfNamed(t)
	clk := clock{t, time.Now()}
	node := harness.ClusterNodes[2]
	r := newClusterRig(t, 2)
	restoreCluster(t)
	p := r.start(t, r.s.URLs[2:])
	stop := r.publishUntil(t, "s5", size(500, 6000))
	r.replies.WaitCount(50, time.Minute)
	clk.phase("under load")

	var notes []string
	var worst time.Duration
	restart := func(what string, down, up func()) {
		t.Helper()
		seen := r.replies.Len()
		cut := time.Now()
		down()
		clk.phase("%s: node down", what)
		unready := false
		for time.Since(cut) < 30*time.Second {
			if _, code, err := p.Get("/readyz"); err == nil && code != 200 {
				unready = true
				break
			}
			time.Sleep(100 * time.Millisecond) // /readyz is polled
		}
		if !unready {
			t.Errorf("%s: /readyz stayed ready with its only node down", what)
		}
		time.Sleep(2 * time.Second) // the outage's length
		up()
		back := time.Now()
		clk.phase("%s: node back", what)
		resumed := time.Duration(-1)
		for time.Since(back) < time.Minute {
			if _, code, err := p.Get("/readyz"); err == nil && code == 200 {
				resumed = time.Since(back)
				break
			}
			time.Sleep(100 * time.Millisecond) // as above
		}
		switch {
		case resumed < 0:
			t.Errorf("%s: not ready a minute after the node was back; log:\n%s", what, harness.Tail(p.Log(), 30))
		case resumed > 15*time.Second:
			// The redial backoff is capped at 10 s (jittered), plus a dial
			// and a handshake on a busy machine.
			t.Errorf("%s: ready %s after the node was back, want within the redial backoff's cap of 10s and a dial", what, resumed.Round(time.Millisecond))
		}
		if !r.replies.WaitCount(seen+50, time.Minute) {
			t.Errorf("%s: %d runs replied in the minute after the node was back, want progress", what, r.replies.Len()-seen)
		}
		clk.phase("%s: ready again %.1fs after await_startup, and replying", what, resumed.Seconds())
		worst = max(worst, resumed)
		notes = append(notes, fmt.Sprintf("%s: not ready while down, ready %.1fs after await_startup, %.0fs after the fault", what, resumed.Seconds(), time.Since(cut).Seconds()))
	}
	restart("stop_app/start_app", func() { node.StopApp(t) }, func() { node.StartApp(t) })
	repo := repoRoot(t)
	restart("kill -9 + start", func() { node.Kill(t) }, func() { harness.Restart(t, repo) })

	stop()
	clk.phase("%d sent", r.gen.Sent.Len())
	v, _ := r.finish(t, 3*time.Minute, nil)
	clk.phase("drained and checked")
	if strings.Contains(p.Log(), "guest:guest") {
		t.Errorf("the runtime logged a password")
	}
	harness.Record(t, harness.Row{Scenario: "S5 node restart", Faults: "stop_app/start_app, then kill -9 of the beam and a start, of the runtime's only node " + node.Short(), Verdict: v,
		Recovery: fmt.Sprintf("%.1fs worst after await_startup", worst.Seconds()),
		Notes: fmt.Sprintf("%s; %d deliveries whose result the broker nacked, held and published again; generator redialled %d×, republished %d with the same id; quorum queues on 3 nodes, the node restarted holds a replica",
			strings.Join(notes, "; "), p.Count(nackedLine), r.gen.Redials(), r.gen.Republished())})
}

// nackedLine is in the runtime's log once for each delivery whose result
// the broker nacked (held, and published again until taken).
const nackedLine = `msg="the broker refused the publish (basic.nack)`
