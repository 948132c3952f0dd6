package runtime

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/testenv"
)

const stallDurationFlow = `version: acemq.flow/v1
name: s
plugins:
  slow: {command: ./slow, timeout: 2m}
  quick: {command: ./quick}
  inproc: {command: ./inproc, timeout: 5m}
pipelines:
  - name: p
    steps:
      - {name: a, handler: slow.work}
      - {name: b, handler: quick.work}
      - {name: c, handler: inproc.work}
`

// A group's stall duration is its handler's call timeout + the confirm
// deadline + the margin; Options.StallAfter replaces it for every group.
func TestStallDurationIsCallTimeoutPlusConfirmDeadlinePlusMargin(t *testing.T) {
	set, err := spec.Load(testenv.FlowFS(stallDurationFlow), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*plan.Consumer{}
	for i := range pl.Consumers {
		byID[pl.Consumers[i].ID] = &pl.Consumers[i]
	}
	handlers := map[string]HandlerFunc{"inproc.work": nil}
	r := &Runtime{plan: pl, opts: Options{Handlers: handlers}}
	for id, want := range map[string]time.Duration{
		"p.a": 2*time.Minute + 60*time.Second, // the plugin's own timeout
		"p.b": 90 * time.Second,               // the default timeout of 30 s
		"p.c": 90 * time.Second,               // in process: no call timeout (not the plugin's), the default's
	} {
		c := byID[id]
		if c == nil {
			t.Fatalf("no consumer %q in the plan", id)
		}
		if got := r.stallAfter(c); got != want {
			t.Errorf("consumer %s: stall after %s, want %s", id, got, want)
		}
	}
	r.opts.StallAfter = 3 * time.Second
	if got := r.stallAfter(byID["p.a"]); got != 3*time.Second {
		t.Errorf("with Options.StallAfter 3s: stall after %s, want 3s", got)
	}
}

// stallGroup is a running group with a stall duration of 10 s, outside
// any runtime.
func stallGroup(id string) *group {
	g := &group{c: &plan.Consumer{ID: id, Queue: id + ".q"}, state: StateRunning, stallAfter: 10 * time.Second,
		mInflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "inflight"})}
	g.show()
	return g
}

// A group is stalled only while it holds deliveries and has finished none
// for longer than its stall duration, counted from the later of its last
// finish and when it began to hold any; never when idle, nor when not
// running.
func TestGroupStalledOnlyWhileHoldingWithoutProgress(t *testing.T) {
	g := stallGroup("g")
	now := time.Now()
	if s, ok := g.stalled(now.Add(time.Hour)); ok {
		t.Errorf("a group that never held anything, an hour on: stalled %+v, want not", s)
	}

	// Held, nothing finished for an hour. (Since is on the wall clock,
	// read from the monotonic one: within a hair of start.)
	start := now
	g.hold(start)
	if _, ok := g.stalled(start.Add(9 * time.Second)); ok {
		t.Error("9 s after taking a delivery, with a stall duration of 10 s: stalled, want not yet")
	}
	s, ok := g.stalled(start.Add(time.Hour))
	if !ok || s.Consumer != "g" || s.Queue != "g.q" || s.Held != 1 || s.After != "10s" || s.Since.Sub(start).Abs() > time.Millisecond {
		t.Fatalf("an hour after taking a delivery = %+v (stalled %v), want g on g.q holding 1 since %s", s, ok, start)
	}
	if why := s.Why(); !strings.Contains(why, `consumer "g" on queue "g.q" is stalled: it holds 1 delivery and has finished none for 1h0m0s`) {
		t.Errorf("Why = %q", why)
	}

	// A second delivery taken while the first is held does not restart
	// the clock: still none finished.
	g.hold(start.Add(time.Hour))
	if s, ok := g.stalled(start.Add(time.Hour)); !ok || s.Held != 2 {
		t.Errorf("a second delivery taken, none finished = %+v (stalled %v), want stalled holding 2", s, ok)
	}

	// One finished: progress, though one is still held.
	g.finish()
	done := time.Now()
	if s, ok := g.stalled(done.Add(5 * time.Second)); ok {
		t.Errorf("5 s after a delivery finished, one still held: stalled %+v, want not", s)
	}
	if s, ok := g.stalled(done.Add(11 * time.Second)); !ok || s.Held != 1 {
		t.Errorf("11 s after the last finish, one held = %+v (stalled %v), want stalled holding 1", s, ok)
	}

	// Not stalled when it is not running (stopping: its drain timeout
	// bounds that).
	g.state = StateStopping
	g.show()
	if s, ok := g.stalled(done.Add(time.Hour)); ok {
		t.Errorf("a stopping group: stalled %+v, want not", s)
	}
	g.state = StateRunning
	g.show()

	// Idle again: never stalled, however long.
	g.finish()
	if s, ok := g.stalled(done.Add(24 * time.Hour)); ok {
		t.Errorf("a group holding nothing, a day on: stalled %+v, want not", s)
	}

	// Idle for a day, then taking one: counted from when it took it,
	// not from its last finish a day before.
	later := done.Add(24 * time.Hour)
	g.hold(later)
	if s, ok := g.stalled(later.Add(time.Second)); ok {
		t.Errorf("1 s after taking a delivery when idle for a day: stalled %+v, want not", s)
	}
}

// Stalls lists the stalled groups in consumer id order, and nothing before
// the consumers run.
func TestStallsListsStalledGroupsInOrder(t *testing.T) {
	r := &Runtime{started: make(chan struct{}), groups: map[string]*group{}}
	for _, id := range []string{"a", "b", "c"} {
		g := stallGroup(id)
		g.stallAfter = time.Millisecond
		r.groups[id] = g
		r.order = append(r.order, id)
	}
	r.groups["a"].hold(time.Now())
	r.groups["c"].hold(time.Now())
	if ss := r.Stalls(); ss != nil {
		t.Errorf("Stalls before the consumers run = %+v, want nil", ss)
	}
	close(r.started)
	var ss []Stall
	// The groups' stall duration is 1 ms: passed once the clock moves.
	testenv.Eventually(t, 5*time.Second, func() error {
		if ss = r.Stalls(); len(ss) < 2 {
			return testenv.Errorf("Stalls = %+v, want a and c", ss)
		}
		return nil
	})
	if len(ss) != 2 || ss[0].Consumer != "a" || ss[1].Consumer != "c" {
		t.Errorf("Stalls = %+v, want a and c (b holds nothing)", ss)
	}
}

// BenchmarkHoldFinish measures what a delivery's progress tracking costs
// (hold and finish: an atomic load, two stores and a clock read beside the
// in-flight count), against the in-flight count alone, from parallel
// goroutines as a group's handlers run.
func BenchmarkHoldFinish(b *testing.B) {
	b.Run("in-flight-only", func(b *testing.B) {
		g := stallGroup("b")
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				now := time.Now() // handle reads the clock for every delivery anyway
				_ = now
				g.inflight.Add(1)
				g.mInflight.Inc()
				g.inflight.Add(-1)
				g.mInflight.Dec()
			}
		})
	})
	b.Run("hold-finish", func(b *testing.B) {
		g := stallGroup("b")
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				g.hold(time.Now())
				g.finish()
			}
		})
	})
}
