package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// countingSagas counts the CountSagas calls that reach the store, and
// fails them while fail is set.
type countingSagas struct {
	stores.Sagas
	calls atomic.Int32
	fail  atomic.Bool
}

func (c *countingSagas) CountSagas(ctx context.Context) ([]stores.SagaCount, error) {
	c.calls.Add(1)
	if c.fail.Load() {
		return nil, errors.New("connection refused")
	}
	return c.Sagas.CountSagas(ctx)
}

func memStore(t *testing.T) *memory.Store {
	t.Helper()
	s, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// putSaga creates an instance of saga in state.
func putSaga(t *testing.T, s stores.Sagas, saga, id string, state stores.SagaState) {
	t.Helper()
	inst, _, err := s.CreateSaga(t.Context(), stores.SagaInstance{Saga: saga, ID: id, State: stores.SagaRunning,
		Steps: []stores.SagaStep{{Name: "a", State: stores.StepPending}}})
	if err != nil {
		t.Fatal(err)
	}
	if state != stores.SagaRunning {
		inst.State = state
		if _, err := s.AdvanceSaga(t.Context(), inst); err != nil {
			t.Fatal(err)
		}
	}
}

// gathered is every sample reg gathers as `name{label="value",…} value`,
// sorted.
func gathered(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather the metrics: %v", err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			out = append(out, fmt.Sprintf("%s %g", name, v))
		}
	}
	slices.Sort(out)
	return out
}

// TestSagaMetricsCountTheStore: the gauges are the store's counts, every
// state of every saga reported (0 where none), a saga the runtime runs
// reported before it has an instance, on the memory store and on SQLite.
func TestSagaMetricsCountTheStore(t *testing.T) {
	backends := []struct {
		name string
		open func(t *testing.T) stores.Sagas
	}{
		{"memory", func(t *testing.T) stores.Sagas { return memStore(t) }},
		{"sqlite", func(t *testing.T) stores.Sagas { return storetest.OpenSQLite(t, stores.Options{}) }},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t)
			putSaga(t, s, "place-order", "o-1", stores.SagaRunning)
			putSaga(t, s, "place-order", "o-2", stores.SagaRunning)
			putSaga(t, s, "place-order", "o-3", stores.SagaUnresolved)
			putSaga(t, s, "place-order", "o-4", stores.SagaCompleted)
			putSaga(t, s, "refund", "r-1", stores.SagaCompensating)
			m := NewSagaMetrics(s, SagaMetricsOptions{Sagas: []string{"place-order", "restock"}})
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(m)
			want := []string{
				`acemq_saga_instances{saga="place-order",state="compensated"} 0`,
				`acemq_saga_instances{saga="place-order",state="compensating"} 0`,
				`acemq_saga_instances{saga="place-order",state="completed"} 1`,
				`acemq_saga_instances{saga="place-order",state="running"} 2`,
				`acemq_saga_instances{saga="place-order",state="unresolved"} 1`,
				`acemq_saga_instances{saga="refund",state="compensated"} 0`,
				`acemq_saga_instances{saga="refund",state="compensating"} 1`,
				`acemq_saga_instances{saga="refund",state="completed"} 0`,
				`acemq_saga_instances{saga="refund",state="running"} 0`,
				`acemq_saga_instances{saga="refund",state="unresolved"} 0`,
				`acemq_saga_instances{saga="restock",state="compensated"} 0`,
				`acemq_saga_instances{saga="restock",state="compensating"} 0`,
				`acemq_saga_instances{saga="restock",state="completed"} 0`,
				`acemq_saga_instances{saga="restock",state="running"} 0`,
				`acemq_saga_instances{saga="restock",state="unresolved"} 0`,
				`acemq_saga_metrics_errors_total 0`,
				`acemq_saga_unresolved{saga="place-order"} 1`,
				`acemq_saga_unresolved{saga="refund"} 0`,
				`acemq_saga_unresolved{saga="restock"} 0`,
			}
			if got := gathered(t, reg); !slices.Equal(got, want) {
				t.Fatalf("the saga metrics of a store with 5 instances:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestSagaMetricsCacheTheCount: scrapes within MaxAge share one count of
// the store; the next after it counts again and sees what changed; a
// failed count keeps the last values, is counted, and is not retried
// before MaxAge either.
func TestSagaMetricsCacheTheCount(t *testing.T) {
	clock := testenv.NewClock()
	s := &countingSagas{Sagas: memStore(t)}
	putSaga(t, s, "place-order", "o-1", stores.SagaUnresolved)
	m := NewSagaMetrics(s, SagaMetricsOptions{MaxAge: 5 * time.Second, Now: clock.Now})
	value := func(name string) float64 {
		t.Helper()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(m)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				if g := mf.GetMetric()[0].GetGauge(); g != nil {
					return g.GetValue()
				}
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return -1
	}
	check := func(what string, wantValue float64, wantCalls int32) {
		t.Helper()
		if got, calls := value("acemq_saga_unresolved"), s.calls.Load(); got != wantValue || calls != wantCalls {
			t.Errorf("%s: acemq_saga_unresolved = %v after %d counts of the store, want %v after %d", what, got, calls, wantValue, wantCalls)
		}
	}
	check("first scrape", 1, 1)
	putSaga(t, s, "place-order", "o-2", stores.SagaUnresolved)
	for range 10 {
		check("scrapes within MaxAge", 1, 1)
	}
	clock.Advance(5 * time.Second)
	check("a scrape MaxAge later", 2, 2)

	s.fail.Store(true)
	clock.Advance(5 * time.Second)
	check("a scrape whose count fails", 2, 3)
	check("a scrape right after the failure", 2, 3)
	if got := value("acemq_saga_metrics_errors_total"); got != 1 {
		t.Errorf("acemq_saga_metrics_errors_total = %v after one failed count, want 1", got)
	}
	s.fail.Store(false)
	clock.Advance(5 * time.Second)
	check("a scrape once the store answers again", 2, 4)
}

// TestSagaMetricsReportNothingBeforeACount: with a store that never
// answered, the gauges are absent rather than a false 0.
func TestSagaMetricsReportNothingBeforeACount(t *testing.T) {
	s := &countingSagas{Sagas: memStore(t)}
	s.fail.Store(true)
	m := NewSagaMetrics(s, SagaMetricsOptions{Sagas: []string{"place-order"}})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	want := []string{"acemq_saga_metrics_errors_total 1"}
	if got := gathered(t, reg); !slices.Equal(got, want) {
		t.Fatalf("the saga metrics of a store that never answered: %v, want %v", got, want)
	}
}
