package scheduler

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/sqlite"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

func everySecond(name, missed string) plan.Schedule {
	return plan.Schedule{Name: name, Flow: "shop", Every: plan.Duration(time.Second), Timezone: "UTC", Missed: missed,
		MissedWindow: plan.Duration(time.Hour), Send: plan.Send{Exchange: "billing", RoutingKey: "invoices." + name, Payload: []byte(`{"kind":"tick"}`)}}
}

// firedTicks reads the ticks of the records the store holds, by schedule.
func firedTicks(t *testing.T, s stores.OutboxRelay) map[string][]time.Time {
	t.Helper()
	rs, err := s.ListPending(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]time.Time{}
	for _, r := range rs {
		key, _ := r.Properties.Headers[plan.HeaderSchedule].(string)
		tick, err := time.Parse(time.RFC3339Nano, r.Properties.Headers[plan.HeaderTick].(string))
		if err != nil {
			t.Fatalf("record %d: x-acemq-tick: %v", r.ID, err)
		}
		if want := decide.TickMessageID(key, tick); r.Properties.MessageID != want || r.Properties.CorrelationID != want {
			t.Fatalf("record %d of %s at %s: message id %q, correlation id %q; want the UUIDv5 %q for both", r.ID, key, TickText(tick),
				r.Properties.MessageID, r.Properties.CorrelationID, want)
		}
		out[key] = append(out[key], tick)
	}
	for _, ticks := range out {
		slices.SortFunc(ticks, time.Time.Compare)
	}
	return out
}

func runSchedules(t *testing.T, ctx context.Context, wg *sync.WaitGroup, p *plan.Plan, store tickStore) *Schedules {
	t.Helper()
	s, err := NewSchedules(SchedulesOptions{Plan: p, Store: store, Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = s.Run(ctx) })
	return s
}

// Two loops on one store, as two replicas: every tick is written once.
func TestSchedulesFireEachTickOnceAcrossLoops(t *testing.T) {
	a := storetest.OpenSQLite(t, stores.Options{})
	b, err := sqlite.Open(t.Context(), a.Path(), stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	p := &plan.Plan{Schedules: []plan.Schedule{everySecond("fast", MissedLatest)}}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	runSchedules(t, ctx, &wg, p, a)
	runSchedules(t, ctx, &wg, p, b)
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := len(firedTicks(t, a)["shop/fast"]); n < 4 {
			return testenv.Errorf("%d ticks fired, want 4", n)
		}
		return nil
	})
	cancel()
	wg.Wait()
	ticks := firedTicks(t, a)["shop/fast"]
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Fatalf("ticks fired by two loops on one store = %v: %s between ticks %d and %d, want each second exactly once", ticks, d, i, i+1)
		}
	}
	rs, _ := a.ListPending(t.Context(), 1)
	if r := rs[0]; r.Exchange != "billing" || r.RoutingKey != "invoices.fast" || string(r.Body) != `{"kind":"tick"}` ||
		r.Properties.Headers[plan.HeaderOrigin] != "shop" || r.Properties.DeliveryMode != 2 {
		t.Fatalf("a firing's record = %+v, want the schedule's payload to billing/invoices.fast, persistent, from flow shop", r)
	}
}

// All replicas stopped for 10 s: on restart latest fires the newest missed
// tick, all fires each, skip none; each is counted.
func TestSchedulesMissedTicksOnRestart(t *testing.T) {
	store := storetest.OpenSQLite(t, stores.Options{})
	p := &plan.Plan{Schedules: []plan.Schedule{everySecond("latest", MissedLatest), everySecond("all", MissedAll), everySecond("skip", MissedSkip)}}
	stopped := time.Now().Add(-10 * time.Second).Truncate(time.Second)
	for _, s := range p.Schedules {
		m, err := decide.TickMessage(p, s, stopped)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := store.ClaimTick(t.Context(), s.Key(), stopped, OutboxRecord(m)); !ok || err != nil {
			t.Fatalf("ClaimTick(%s, %s) = %v, %v", s.Key(), stopped, ok, err)
		}
	}
	started := time.Now()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	loop := runSchedules(t, ctx, &wg, p, store)
	// Each schedule's first on-time tick shows its recovery is over.
	testenv.Eventually(t, 10*time.Second, func() error {
		for key, ticks := range firedTicks(t, store) {
			if !ticks[len(ticks)-1].After(started) {
				return testenv.Errorf("%s has fired no tick after the restart yet", key)
			}
		}
		return nil
	})
	cancel()
	wg.Wait()
	down := func(ticks []time.Time) []time.Time {
		var out []time.Time
		for _, tk := range ticks {
			if tk.After(stopped) && !tk.After(started) {
				out = append(out, tk)
			}
		}
		return out
	}
	tk, _ := decide.NewTicker("", time.Second, "")
	all := tk.Between(stopped, started, 100)
	got := firedTicks(t, store)
	if d := down(got["shop/latest"]); len(d) != 1 || !d[0].Equal(all[len(all)-1]) {
		t.Errorf("missed: latest fired %v of the ticks missed while stopped, want only the newest, %s", d, all[len(all)-1])
	}
	if d := down(got["shop/all"]); !slices.EqualFunc(d, all, time.Time.Equal) {
		t.Errorf("missed: all fired %v of the ticks missed while stopped, want each of %v", d, all)
	}
	if d := down(got["shop/skip"]); len(d) != 0 {
		t.Errorf("missed: skip fired %v of the ticks missed while stopped, want none", d)
	}
	for key, want := range map[string]float64{"shop/latest": float64(len(all) - 1), "shop/all": 0, "shop/skip": float64(len(all))} {
		if n := counterValue(t, loop.opts.Metrics.(prometheus.Gatherer), "acemq_schedule_missed_ticks_total", key); n != want {
			t.Errorf("acemq_schedule_missed_ticks_total{schedule=%q} = %v, want %v", key, n, want)
		}
	}
}

// counterValue reads the counter name of schedule from g.
func counterValue(t *testing.T, g prometheus.Gatherer, name, schedule string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "schedule" && l.GetValue() == schedule {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{schedule=%q} gathered", name, schedule)
	return 0
}
