//go:build chaos

package reliability

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// sagaFlow is a three-step saga on the recorder: s1 and s2 each with a
// compensation, s3 last (it cannot be undone). A payload naming
// fatal_step order.s3 fails s3 for good, so its instance compensates s2
// and then s1.
const sagaFlow = `version: acemq.flow/v1
name: relsaga
defaults:
  retry: {max_attempts: 3, initial_delay: 200ms, max_delay: 1s, jitter: 0}
plugins:
  recorder:
    command: "@RECORDER@"
    env: {LEDGER_URL: "@LEDGER@"}
    timeout: 5s
sagas:
  - name: order
    steps:
      - {name: s1, handler: recorder.record, compensate: recorder.record}
      - {name: s2, handler: recorder.record, compensate: recorder.record}
      - {name: s3, handler: recorder.record}
`

// sagaBoundaries are the ledger's steps (queues) whose next effect after
// a restart triggers the next kill, in turn: each forward step's
// boundary, then each compensation's.
var sagaBoundaries = []string{"order.s1", "order.s2", "order.s3", "order.s2.compensate", "order.s1.compensate"}

// TestChaosS20SagaKill9 runs sagas under load and kills the runtime with
// -9 at each saga step boundary in turn (just after a new effect of s1,
// s2, s3, the compensation of s2, the compensation of s1: the moment a
// step's effect is done and its state write and next message are due)
// and then at random moments, restarting it each time. The runtime has no
// crash points of its own, so the boundaries are found from the ledger.
// Every instance ends in the state it would have reached without the
// kills (completed, or compensated when s3 fails for good), no step or
// compensation is run for a second message (each has one message id), a
// step done twice for the same message is one a kill interrupted between
// its effect and its acknowledgement (its two effects straddle a kill),
// and no instance is left running or compensating once drained.
func TestChaosS20SagaKill9(t *testing.T) {
	shortIfNamed(t)
	r := newRig(t, true)
	body := strings.NewReplacer("@RECORDER@", recorder, "@LEDGER@", r.s.Ledger).Replace(sagaFlow)
	if err := os.WriteFile(r.flow, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	rnd := rng(t)
	p := r.start(t)
	n := size(600, 3000)
	want := map[string]string{}
	msgs := make([]harness.Message, n)
	prefix := "s20-" + harness.Random(3)
	for i := range msgs {
		id := fmt.Sprintf("%s-%d", prefix, i)
		payload, state := `{"k":1}`, "completed"
		if i%3 == 0 {
			payload, state = `{"k":1,"fatal_step":"order.s3"}`, "compensated"
		}
		want[id] = state
		msgs[i] = harness.Message{ID: id, Exchange: "order", Key: "s1", Body: payload, Headers: amqp.Table{"x-acemq-saga": "order"}}
	}
	done := make(chan error, 1)
	go func() { done <- r.gen.Publish(50, msgs...) }() // 50 sagas/s: a backlog the kills fall into
	effectsAt := func(step string) int {
		v, _ := strconv.Atoi(harness.PSQL(t, r.ledger.URL, "SELECT count(*) FROM effects WHERE step = '"+step+"'"))
		return v
	}
	var kills []time.Time
	var timeline []string
	var lastRestart time.Time
	rounds := len(sagaBoundaries) + size(1, 5)
	for round := range rounds {
		what := "random"
		if round < len(sagaBoundaries) {
			step := sagaBoundaries[round]
			what = "after a new effect at " + step
			base, end := effectsAt(step), time.Now().Add(2*time.Minute)
			for effectsAt(step) == base {
				if time.Now().After(end) {
					t.Fatalf("round %d: no new effect at %s within 2 minutes; log:\n%s", round+1, step, harness.Tail(p.Log(), 30))
				}
				time.Sleep(20 * time.Millisecond) // the ledger has no event to wait on
			}
		} else {
			time.Sleep(time.Duration(200+rnd.IntN(1500)) * time.Millisecond) // the fault's moment, chosen at random (seeded)
		}
		p.Signal(syscall.SIGKILL)
		kills = append(kills, time.Now())
		timeline = append(timeline, what)
		if _, ok := p.Wait(30 * time.Second); !ok {
			t.Fatal("the runtime did not die within 30s of SIGKILL")
		}
		if left := waitNoPlugins(10 * time.Second); len(left) > 0 {
			t.Errorf("plugin processes %v outlived the runtime killed with -9", left)
		}
		p = r.start(t)
		lastRestart = time.Now()
	}
	if err := <-done; err != nil {
		t.Errorf("generator: %v", err)
	}
	v, _, _ := r.finish(t, 3*time.Minute)
	drained := time.Since(lastRestart)

	// The same terminal state as without the kills.
	outcomes := r.replies.Outcomes()
	wrong := 0
	for id, state := range want {
		if got, ok := outcomes[id]; ok && got != state {
			if wrong++; wrong <= 5 {
				t.Errorf("saga %s ended %q, want %q", id, got, state)
			}
		}
	}
	stuck := harness.PSQL(t, r.store, "SELECT count(*) FROM acemq_sagas WHERE state IN ('running', 'compensating')")
	if stuck != "0" {
		t.Errorf("%s saga instances still running or compensating after the drain, want 0; e.g. %s", stuck,
			harness.PSQL(t, r.store, "SELECT id || ' ' || state || ' step ' || step || ' updated ' || updated_at FROM acemq_sagas WHERE state IN ('running', 'compensating') LIMIT 3"))
	}
	// One message per step and compensation; each compensation only where
	// it belongs.
	ids := r.ledger.EffectIDs(t)
	secondMessage := 0
	for run, steps := range ids {
		for step, mids := range steps {
			if len(mids) > 1 {
				if secondMessage++; secondMessage <= 5 {
					t.Errorf("saga %s: %s ran for %d messages %v, want one: a step or compensation was issued twice", run, step, len(mids), mids)
				}
			}
			if strings.HasSuffix(step, ".compensate") && want[run] != "compensated" {
				t.Errorf("saga %s (to end %s) ran %s", run, want[run], step)
			}
		}
		if want[run] == "compensated" && (len(steps["order.s1.compensate"]) != 1 || len(steps["order.s2.compensate"]) != 1 || len(steps["order.s3"]) != 0) {
			t.Errorf("saga %s: effects at %v, want s1, s2 and both compensations, no s3", run, keys(steps))
		}
	}
	// A step done twice for one message: the kill came between its effect
	// and its acknowledgement, so its first effect is before a kill and its
	// second after.
	unexplained := 0
	for _, row := range strings.Split(harness.PSQL(t, r.ledger.URL,
		"SELECT run_id, step, (extract(epoch from first_at)*1000)::bigint, (extract(epoch from last_at)*1000)::bigint FROM effects WHERE n > 1"), "\n") {
		f := strings.Split(row, "|")
		if len(f) != 4 {
			continue
		}
		first, _ := strconv.ParseInt(f[2], 10, 64)
		last, _ := strconv.ParseInt(f[3], 10, 64)
		straddles := false
		for _, k := range kills {
			if ms := k.UnixMilli(); first <= ms && ms <= last {
				straddles = true
			}
		}
		if !straddles {
			if unexplained++; unexplained <= 5 {
				t.Errorf("saga %s: %s had its effect twice with no kill between (%d → %d ms): not the kill's at-least-once window", f[0], f[1], first, last)
			}
		}
	}
	compensated := 0
	for _, s := range want {
		if s == "compensated" {
			compensated++
		}
	}
	t.Logf("kill timeline: %s", strings.Join(timeline, "; "))
	harness.Record(t, harness.Row{Scenario: "S20 saga kill -9 at each boundary", Faults: fmt.Sprintf("%d× kill -9 (5 boundaries, then random), restart at once", len(kills)), Verdict: v,
		Recovery: fmt.Sprintf("drained %.0fs after the last restart", drained.Seconds()),
		Notes: fmt.Sprintf("%d sagas, %d compensating; %d wrong end states, %s stuck, %d steps or compensations issued twice, %d redone with no kill between; dup effects = steps redone for the same message across a kill (at-least-once)",
			n, compensated, wrong, stuck, secondMessage, unexplained)})
}

func keys(m map[string]map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
