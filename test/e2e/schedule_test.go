package e2e

import (
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/test/testenv"
)

const scheduledFlow = `version: acemq.flow/v1
name: clock
topology:
  exchanges: [{name: ticks, type: topic}]
schedules:
  - {name: latest, every: 1s, missed: latest, send: {exchange: ticks, routing_key: latest, payload: {kind: tick}}}
  - {name: all, every: 1s, missed: all, send: {exchange: ticks, routing_key: all, payload: {kind: tick}}}
  - {name: skip, every: 1s, missed: skip, send: {exchange: ticks, routing_key: skip, payload: {kind: tick}}}
`

// firing is one message a schedule published.
type firing struct {
	tick time.Time
	id   string
}

// Three runtime processes on one PostgreSQL store fire each tick of an
// every: 1s schedule exactly once for a minute; stopped together for 10 s
// and started again, missed: latest fires the newest missed tick only,
// all fires each, skip none (FLOW-FORMAT §4).
func TestSchedulesFireOncePerTickAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 80 s")
	}
	url := testenv.VHost(t)
	storeURL := testenv.PostgresSchema(t)
	if out, errOut, code := cli(t, "migrate", "--store", storeURL); code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	flow := writeFlow(t, scheduledFlow)

	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("ticks", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "#", "ticks", false, nil); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string][]firing{}
	var consumed sync.WaitGroup
	consumed.Go(func() {
		for d := range deliveries {
			tick, err := time.Parse(time.RFC3339Nano, d.Headers["x-acemq-tick"].(string))
			if err != nil {
				t.Errorf("x-acemq-tick %v: %v", d.Headers["x-acemq-tick"], err)
				continue
			}
			if want := "clock/" + d.RoutingKey; d.Headers["x-acemq-schedule"] != want {
				t.Errorf("x-acemq-schedule = %v, want %s", d.Headers["x-acemq-schedule"], want)
			}
			mu.Lock()
			got[d.RoutingKey] = append(got[d.RoutingKey], firing{tick: tick, id: d.MessageId})
			mu.Unlock()
		}
	})
	ticksAfter := func(key string, after time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, f := range got[key] {
			if f.tick.After(after) {
				n++
			}
		}
		return n
	}
	start := func() []*runtimeProc {
		var ps []*runtimeProc
		for range 3 {
			ps = append(ps, startRuntime(t, url, "--store", storeURL, flow))
		}
		return ps
	}
	stop := func(ps []*runtimeProc) {
		for _, p := range ps {
			if err := p.stop(t, syscall.SIGTERM); err != nil {
				t.Errorf("the runtime exited with %v; its log:\n%s", err, p.output())
			}
		}
	}

	replicas := start()
	began := time.Now()
	testenv.Eventually(t, 90*time.Second, func() error {
		if n := ticksAfter("all", began); n < 60 {
			return testenv.Errorf("%d ticks of clock/all delivered since the replicas started, want 60", n)
		}
		return nil
	})
	stop(replicas)
	stopped := time.Now()
	time.Sleep(10 * time.Second) // the scenario: no runtime at all for 10 s
	restarted := time.Now()
	replicas = start()
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, key := range []string{"latest", "all", "skip"} {
			if n := ticksAfter(key, restarted.Add(3*time.Second)); n < 3 {
				return testenv.Errorf("clock/%s: %d ticks delivered since the restart, want 3", key, n)
			}
		}
		return nil
	})
	stop(replicas)
	ch.Close() // ends the deliveries
	consumed.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, key := range []string{"latest", "all", "skip"} {
		fs := got[key]
		slices.SortFunc(fs, func(a, b firing) int { return a.tick.Compare(b.tick) })
		// Exactly once: no tick twice, each with the same UUIDv5 id
		// whoever fired it.
		ids := map[string]time.Time{}
		for i, f := range fs {
			if i > 0 && f.tick.Equal(fs[i-1].tick) {
				t.Errorf("clock/%s: tick %s delivered twice", key, f.tick.Format(time.RFC3339))
			}
			if prev, ok := ids[f.id]; ok {
				t.Errorf("clock/%s: message id %s used by ticks %s and %s", key, f.id, prev, f.tick)
			}
			ids[f.id] = f.tick
		}
		// The last tick fired before the stop, and the first after.
		i := slices.IndexFunc(fs, func(f firing) bool { return f.tick.After(stopped) })
		if i <= 0 {
			t.Fatalf("clock/%s: no tick delivered from both runs: %v", key, ticksOf(fs))
		}
		before, after := fs[:i], fs[i:]
		// While replicas ran, every second fired: no gap.
		for _, run := range [][]firing{before, after} {
			for j := 1; j < len(run); j++ {
				if d := run[j].tick.Sub(run[j-1].tick); d != time.Second {
					t.Errorf("clock/%s: %s between ticks %s and %s while replicas ran, want every second", key, d,
						run[j-1].tick.Format(time.TimeOnly), run[j].tick.Format(time.TimeOnly))
				}
			}
		}
		last, first := before[len(before)-1].tick, after[0].tick
		down := restarted.Truncate(time.Second) // the newest tick missed for certain
		switch key {
		case "all":
			if d := first.Sub(last); d != time.Second {
				t.Errorf("missed: all: the first tick after the restart is %s after the last before the stop, want each missed tick fired (1s)", d)
			}
		case "latest":
			// One firing for the whole outage: the newest missed tick (the
			// first replica's start may make it a second or two newer).
			if first.Before(down) || first.After(restarted.Add(5*time.Second)) || first.Sub(last) < 9*time.Second {
				t.Errorf("missed: latest: last tick before the stop %s, first after %s, restarted at %s; want the outage's ticks unfired but its newest",
					last.Format(time.TimeOnly), first.Format(time.TimeOnly), restarted.Format(time.TimeOnly))
			}
		case "skip":
			if !first.After(down) || first.Sub(last) < 10*time.Second {
				t.Errorf("missed: skip: last tick before the stop %s, first after %s, restarted at %s; want no tick of the outage fired",
					last.Format(time.TimeOnly), first.Format(time.TimeOnly), restarted.Format(time.TimeOnly))
			}
		}
	}
	if t.Failed() {
		for key, fs := range got {
			t.Logf("clock/%s: %s", key, strings.Join(ticksOf(fs), " "))
		}
	}
}

func ticksOf(fs []firing) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.tick.Format(time.TimeOnly))
	}
	return out
}
