package runtime

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/acemq-flow/plugins/host"
)

// A consumer group is stalled when it holds deliveries (handed to it and
// not yet acknowledged, nacked, retried or dead-lettered) and has finished
// none of them for longer than its stall duration. Each of a delivery's
// waits is bounded: the handler's call by the plugin's call timeout, each
// publish of what it produced by the publisher's confirm deadline (a
// publish not confirmed in time closes its channel and fails as
// indeterminate). A group whose deliveries all wait longer than both
// together, and a margin for the stores' round trips, is wedged rather
// than slow, whatever its connections say: a node restart can leave a
// consumer holding its whole prefetch on live connections.
//
// A group that holds nothing is never stalled, however long it is idle,
// nor is one paused for a store's outage: its deliveries wait before they
// are counted as held, and the outage is reported as itself. A resource
// alarm that blocks the publishing connection longer than the stall
// duration does make its groups stalled (the confirm deadline does not run
// while the connection is blocked); the blocked connection is reported
// beside them.

// confirmDeadline is how long the oldest publish on a channel waits for
// the broker's confirm before the channel is closed and its publishes fail
// as indeterminate (broker.PublisherOptions.ConfirmTimeout).
const confirmDeadline = 30 * time.Second

// stallMargin is what the stall duration allows beyond the call timeout and
// the confirm deadline: the stores' round trips and a reply's publish.
const stallMargin = 30 * time.Second

// stallAfter is the stall duration of a group whose handler's calls are
// bounded by call: call + confirmDeadline + stallMargin (90 s with a
// plugin's default timeout of 30 s). An in-process handler has no call
// timeout; it is given the plugins' default.
func stallAfter(call time.Duration) time.Duration {
	if call <= 0 {
		call = host.DefaultTimeout
	}
	return call + confirmDeadline + stallMargin
}

// epoch is the origin of the groups' progress times: a group stores them as
// nanoseconds since epoch, read on the monotonic clock, so that a step of
// the wall clock neither makes nor hides a stall.
var epoch = time.Now()

// sinceEpoch is t as a group's progress time.
func sinceEpoch(t time.Time) int64 { return int64(t.Sub(epoch)) }

// Stall is a consumer group that holds deliveries and has finished none for
// longer than its stall duration (After): since Since, the later of when it
// last finished one and when it last began to hold any.
type Stall struct {
	Consumer string    `json:"consumer"`
	Queue    string    `json:"queue"`
	Held     int64     `json:"held"` // deliveries held, none finished since Since
	Since    time.Time `json:"since"`
	For      string    `json:"for"`         // how long since Since when it was found, as "2m5s"
	After    string    `json:"stall_after"` // the stall duration it passed, as "1m30s"
}

// Why is the stall as /readyz says it.
func (s Stall) Why() string {
	held := fmt.Sprintf("%d deliveries", s.Held)
	if s.Held == 1 {
		held = "1 delivery"
	}
	return fmt.Sprintf("consumer %q on queue %q is stalled: it holds %s and has finished none for %s (since %s; stalled after %s); look at its handler, its plugin and the broker",
		s.Consumer, s.Queue, held, s.For, s.Since.UTC().Format(time.RFC3339), s.After)
}

// stalled reports the group's stall at now, if it is stalled. It reads only
// atomics: /readyz may ask as often as it likes.
func (g *group) stalled(now time.Time) (Stall, bool) {
	// held first: a delivery's arrival stores busy before it counts, so a
	// held count seen here comes with a busy time at least as new.
	held := g.inflight.Load()
	if held <= 0 || g.view.Load().state != StateRunning {
		return Stall{}, false
	}
	last := max(g.busy.Load(), g.done.Load())
	since := epoch.Add(time.Duration(last))
	lasted := now.Sub(since)
	if lasted < g.stallAfter {
		return Stall{}, false
	}
	return Stall{Consumer: g.c.ID, Queue: g.c.Queue, Held: held, Since: since.Round(0),
		For: lasted.Round(time.Second).String(), After: g.stallAfter.String()}, true
}

// Stalls returns the consumer groups that are stalled, in consumer id
// order; nil before Run has started the consumers. Ready is false while it
// returns any. It is safe for concurrent use and takes no lock.
func (r *Runtime) Stalls() []Stall {
	select {
	case <-r.started:
	default:
		return nil
	}
	now := time.Now()
	var ss []Stall
	for _, id := range r.order {
		if s, ok := r.groups[id].stalled(now); ok {
			ss = append(ss, s)
		}
	}
	return ss
}

// stallCheck is how often the runtime looks for stalled groups, to log
// when one stalls and when it finishes a delivery again.
const stallCheck = time.Second

// watchStalls logs each group that becomes stalled (an error: someone has
// to look at its handler, its plugin or the broker) and each that is no
// longer, until Run drains. Run starts it once the consumers run.
func (r *Runtime) watchStalls() {
	t := time.NewTicker(stallCheck)
	defer t.Stop()
	logged := map[string]bool{}
	for {
		select {
		case <-r.stopping:
			return
		case <-t.C:
		}
		now := map[string]bool{}
		for _, s := range r.Stalls() {
			now[s.Consumer] = true
			if !logged[s.Consumer] {
				logged[s.Consumer] = true
				r.log.Error("consumer stalled: it holds deliveries and has finished none for longer than its stall duration; look at its handler, its plugin and the broker",
					"consumer", s.Consumer, "queue", s.Queue, "held", s.Held, "since", s.Since, "stall_after", s.After)
			}
		}
		for id := range logged {
			if !now[id] {
				delete(logged, id)
				r.log.Info("consumer no longer stalled", "consumer", id)
			}
		}
	}
}

// stalledGauge is acemq_consumer_stalled, read from the groups when
// scraped: 1 for a stalled group, 0 for the others.
type stalledGauge struct {
	r    *Runtime
	desc *prometheus.Desc
}

func newStalledGauge(r *Runtime) *stalledGauge {
	return &stalledGauge{r: r, desc: prometheus.NewDesc("acemq_consumer_stalled",
		"1 while the consumer holds deliveries and has finished none for longer than its stall duration (its handler's call timeout + the confirm deadline + 30 s), else 0.",
		[]string{"consumer", "queue"}, nil)}
}

func (s *stalledGauge) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

func (s *stalledGauge) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-s.r.started:
	default:
		return
	}
	now := time.Now()
	for _, id := range s.r.order {
		g := s.r.groups[id]
		v := 0.0
		if _, ok := g.stalled(now); ok {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, v, g.c.ID, g.c.Queue)
	}
}
