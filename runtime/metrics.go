package runtime

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the runtime's Prometheus metrics, on a registry of its own
// so that two runtimes in one process (tests) do not collide.
type metrics struct {
	reg          *prometheus.Registry
	messages     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	deadLettered *prometheus.CounterVec
	inflight     *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "acemq_messages_total",
			Help: "Deliveries handled, by consumer and outcome (acknowledged, stopped, retried, dead_lettered, duplicate, in_progress, held, rejected, republished).",
		}, []string{"consumer", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "acemq_handler_duration_seconds",
			Help:    "Time spent in the step handler per delivery.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"consumer"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "acemq_messages_dead_lettered_total",
			Help: "Messages sent to <queue>.dlq, by the queue they failed on.",
		}, []string{"queue"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "acemq_messages_in_flight",
			Help: "Deliveries being handled now, by consumer.",
		}, []string{"consumer"}),
	}
	m.reg.MustRegister(m.messages, m.duration, m.deadLettered, m.inflight,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watch registers the metrics read from the runtime's parts: broker
// reconnects and plugin restarts.
func (m *metrics) watch(r *Runtime) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "acemq_broker_reconnects_total",
		Help: "Times the runtime's broker connections were re-established.",
	}, func() float64 {
		n := r.consume.Reconnects() + r.publish.Reconnects()
		return float64(n)
	}))
	m.reg.MustRegister(&pluginRestarts{r: r, desc: prometheus.NewDesc("acemq_plugin_restarts_total",
		"Times a plugin process was restarted after it crashed.", []string{"plugin"}, nil)})
}

// pluginRestarts reads each plugin's restart count when scraped.
type pluginRestarts struct {
	r    *Runtime
	desc *prometheus.Desc
}

func (p *pluginRestarts) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p *pluginRestarts) Collect(ch chan<- prometheus.Metric) {
	for name, n := range p.r.pluginRestarts() {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.CounterValue, float64(n), name)
	}
}
