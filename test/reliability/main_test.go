//go:build chaos

package reliability

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

var (
	binary   string // acemq-flow, built by TestMain
	recorder string // the recorder plugin, built by TestMain
)

// TestMain builds the runtime and the recorder once, runs the scenarios
// and prints their table.
func TestMain(m *testing.M) {
	if os.Getenv(harness.AMQPEnv) == "" {
		os.Exit(m.Run()) // every scenario skips, naming the variable
	}
	wd, _ := os.Getwd()
	repo := filepath.Clean(filepath.Join(wd, "..", ".."))
	dir, err := os.MkdirTemp("", "acemq-reliability-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary, recorder, err = harness.Build(repo, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	version, _ := exec.Command("rabbitmqctl", "version").Output()
	harness.PrintTable(fmt.Sprintf("acemq-flow reliability suite, %s, RabbitMQ %s, seed %d%s", time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		strings.TrimSpace(string(version)), seed, map[bool]string{true: ", -short", false: ""}[testing.Short()]))
	os.RemoveAll(dir)
	os.Exit(code)
}

// seed drives every random choice of the suite; ACEMQ_CHAOS_SEED replays.
var seed = func() uint64 {
	if s := os.Getenv("ACEMQ_CHAOS_SEED"); s != "" {
		n, _ := strconv.ParseUint(s, 10, 64)
		return n
	}
	return uint64(time.Now().UnixNano())
}()

func rng(t *testing.T) *rand.Rand {
	t.Logf("seed %d (ACEMQ_CHAOS_SEED replays it)", seed)
	return rand.New(rand.NewPCG(seed, uint64(len(t.Name()))))
}

// size picks the -short size or the full one.
func size(short, full int) int {
	if testing.Short() {
		return short
	}
	return full
}

// flowTemplate is the pipeline every scenario loads: two recorder steps,
// idempotent or not as the scenario asks, and a typed pipeline for
// schema-invalid payloads.
const flowTemplate = `version: acemq.flow/v1
name: rel
defaults:
  retry: {max_attempts: 3, initial_delay: 200ms, max_delay: 1s, jitter: 0}
plugins:
  recorder:
    command: "@RECORDER@"
    env: {LEDGER_URL: "@LEDGER@"}
    timeout: 5s
types:
  Order:
    type: object
    required: [id]
    properties: {id: {type: string}}
pipelines:
  - name: work
    steps:
      - {name: a, handler: recorder.record, idempotent: @IDEMPOTENT@, prefetch: 50, concurrency: 4}
      - {name: b, handler: recorder.record, idempotent: @IDEMPOTENT@, prefetch: 50, concurrency: 4}
  - name: typed
    input: Order
    steps:
      - {name: a, handler: recorder.record, input: Order, output: Order, idempotent: @IDEMPOTENT@}
`

// rig is one scenario's services, ledger, flow, store, replies and
// generator.
type rig struct {
	s       *harness.Services
	ledger  *harness.Ledger
	flow    string
	store   string
	replies *harness.Replies
	gen     *harness.Generator
}

const replyQueue = "results"

func newRig(t *testing.T, idempotent bool) *rig {
	t.Helper()
	s := harness.Env(t)
	r := &rig{s: s, ledger: harness.OpenLedger(t, s.Ledger), store: harness.Schema(t, s.Postgres, "store")}
	body := strings.NewReplacer("@RECORDER@", recorder, "@LEDGER@", s.Ledger, "@IDEMPOTENT@", strconv.FormatBool(idempotent)).Replace(flowTemplate)
	r.flow = filepath.Join(t.TempDir(), "rel.yaml")
	if err := os.WriteFile(r.flow, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r.replies = harness.Collect(t, s.AMQP, replyQueue)
	r.gen = harness.NewGenerator(t, s.AMQP, replyQueue)
	return r
}

// start runs the runtime on the rig's flow and store.
func (r *rig) start(t *testing.T, extra ...string) *harness.Runtime {
	t.Helper()
	args := append([]string{"--store", r.store, "--create-schema", "--claim-timeout", "5s", "--drain-timeout", "10s"}, extra...)
	return harness.StartRuntime(t, binary, r.s.AMQP, append(args, r.flow)...)
}

// finish drains, reads the dead letters, checks, and fails the test on a
// lost or unexpected run.
func (r *rig) finish(t *testing.T, d time.Duration) (harness.Verdict, []harness.DeadLetter, string) {
	t.Helper()
	undrained := harness.Drain(t, r.replies, r.s.VHost, replyQueue, r.gen.Sent.IDs(harness.OK), d)
	if undrained != "" {
		t.Errorf("not drained: %s", undrained)
	}
	dead := harness.DeadLetters(t, r.s.AMQP, r.s.VHost)
	v := harness.Check(t, r.gen.Sent, r.replies, dead, r.ledger)
	if len(v.Lost) > 0 {
		t.Errorf("lost %d runs the broker confirmed, e.g. %v", len(v.Lost), first(v.Lost, 5))
	}
	if len(v.Unexpected) > 0 {
		t.Errorf("%d runs completed that were never sent, e.g. %v", len(v.Unexpected), first(v.Unexpected, 5))
	}
	return v, dead, undrained
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func plain(prefix string, n int) []harness.Message {
	return harness.Messages(prefix+"-"+harness.Random(3), "work", "a", `{"k":1}`, n)
}
