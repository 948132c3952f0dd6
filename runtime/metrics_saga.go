package runtime

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/acemq-flow/stores"
)

// SagaCounter is what the saga metrics read: stores.Sagas's CountSagas.
type SagaCounter interface {
	CountSagas(ctx context.Context) ([]stores.SagaCount, error)
}

// SagaMetricsOptions configures NewSagaMetrics. Zero values take the
// defaults.
type SagaMetricsOptions struct {
	// Sagas are the sagas the runtime runs: each is reported in every
	// state, 0 where it has no instance, so that an alert on
	// acemq_saga_unresolved has a series before the first one.
	Sagas []string
	// MaxAge is how long one count of the store answers scrapes (5s):
	// however often Prometheus, or several of them, scrape, the store is
	// counted at most once per MaxAge.
	MaxAge time.Duration
	// Timeout bounds one count (5s); a scrape waits for it at most that
	// long.
	Timeout time.Duration
	// Log gets a warning when a count fails (nil: discarded).
	Log *slog.Logger
	// Now is the clock (time.Now).
	Now func() time.Time
}

// SagaMetrics is a prometheus.Collector of the saga instances in the store
// (FLOW-FORMAT §5): acemq_saga_instances{saga,state}, how many instances
// of each saga are in each state (the ended ones until the store purges
// them), and acemq_saga_unresolved{saga}, how many ended unresolved and
// wait for a person. Every runtime replica reports the same numbers: they
// are the store's, not the replica's. A count that fails keeps the last
// values (none before the first success), is logged and counted in
// acemq_saga_metrics_errors_total. It is safe for concurrent use.
type SagaMetrics struct {
	store SagaCounter
	opts  SagaMetricsOptions

	instances, unresolved, errorsDesc *prometheus.Desc

	mu      sync.Mutex // held through a count: concurrent scrapes share it
	countAt time.Time  // when the store was last counted, successfully or not
	counts  []stores.SagaCount
	counted bool // counts holds a successful count
	errors  int
}

// NewSagaMetrics returns the collector of store's saga instances. It does
// no I/O: the store is counted on the first scrape. Register it on the
// runtime's registry, as the other metrics.
func NewSagaMetrics(store SagaCounter, opts SagaMetricsOptions) *SagaMetrics {
	if opts.MaxAge <= 0 {
		opts.MaxAge = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Sagas = slices.Clone(opts.Sagas)
	return &SagaMetrics{
		store: store,
		opts:  opts,
		instances: prometheus.NewDesc("acemq_saga_instances",
			"Saga instances in the store, by saga and state (running, compensating, completed, compensated, unresolved); ended ones until the store purges them.",
			[]string{"saga", "state"}, nil),
		unresolved: prometheus.NewDesc("acemq_saga_unresolved",
			"Saga instances that ended unresolved (effects happened and were not undone): each needs a person; acemq-flow sagas unresolved lists them.",
			[]string{"saga"}, nil),
		errorsDesc: prometheus.NewDesc("acemq_saga_metrics_errors_total",
			"Times counting the saga instances in the store failed; the saga gauges then keep the last count.",
			nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (m *SagaMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.instances
	ch <- m.unresolved
	ch <- m.errorsDesc
}

// Collect implements prometheus.Collector: it counts the store when the
// last count is older than MaxAge, and reports the counts.
func (m *SagaMetrics) Collect(ch chan<- prometheus.Metric) {
	counts, counted, errs := m.read()
	ch <- prometheus.MustNewConstMetric(m.errorsDesc, prometheus.CounterValue, float64(errs))
	if !counted {
		return
	}
	n := map[string]map[stores.SagaState]int64{}
	for _, s := range m.opts.Sagas {
		n[s] = map[stores.SagaState]int64{}
	}
	for _, c := range counts {
		if n[c.Saga] == nil {
			n[c.Saga] = map[stores.SagaState]int64{}
		}
		n[c.Saga][c.State] += c.Instances
	}
	for saga, byState := range n {
		for _, st := range sagaStates {
			ch <- prometheus.MustNewConstMetric(m.instances, prometheus.GaugeValue, float64(byState[st]), saga, string(st))
		}
		ch <- prometheus.MustNewConstMetric(m.unresolved, prometheus.GaugeValue, float64(byState[stores.SagaUnresolved]), saga)
	}
}

var sagaStates = []stores.SagaState{stores.SagaRunning, stores.SagaCompensating, stores.SagaCompleted, stores.SagaCompensated, stores.SagaUnresolved}

// read returns the counts to report, counting the store first when the
// last count is older than MaxAge. A failed count is retried only after
// MaxAge too: a store that is down is not asked on every scrape.
func (m *SagaMetrics) read() ([]stores.SagaCount, bool, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opts.Now()
	if !m.countAt.IsZero() && now.Sub(m.countAt) < m.opts.MaxAge {
		return m.counts, m.counted, m.errors
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.Timeout)
	defer cancel()
	counts, err := m.store.CountSagas(ctx)
	m.countAt = now
	if err != nil {
		m.errors++
		m.opts.Log.Warn("saga metrics: counting the saga instances failed; the gauges keep the last count", "error", err)
		return m.counts, m.counted, m.errors
	}
	m.counts, m.counted = counts, true
	return m.counts, m.counted, m.errors
}
