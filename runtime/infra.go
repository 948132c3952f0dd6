package runtime

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/stores"
)

// An outage of one of the runtime's own stores (the idempotency store, the
// saga store, the claim check's blob store) is not the message's fault
// (decide/infra.go). The wrapper that meets it holds its delivery
// (decide.Hold) and reports the outage here; from then on every consumer
// group that uses the store waits before it takes its next delivery, so
// the runtime stops consuming what it could not handle, until a probe of
// the store succeeds (the first at once, then decide.PauseBackoff between
// probes). Meanwhile
// /readyz is not ready and says which store is down and since when, each
// failure counts in acemq_store_unavailable_total, and the outage is logged
// when it begins (a warning), when it has lasted a minute (an error: a
// person has to look) and when it ends.
//
// A paused group holds what it was handed (its handlers wait with one
// delivery each, unacknowledged, and the broker sends no more past the
// prefetch): nothing goes back to the queue, which a quorum queue would
// count against x-delivery-limit. An outage longer than the broker's
// consumer_timeout (30 min by default) has the broker close the channel;
// the deliveries then go back to the queue once, and are taken again when
// the store answers.

// StoreOutage is one of the runtime's own stores found unavailable: which,
// since when, and the failure that showed it.
type StoreOutage struct {
	Store string    `json:"store"` // decide.StoreIdempotency, StoreSaga or StoreBlobs
	Since time.Time `json:"since"`
	Error string    `json:"error"`
}

// Why is the outage as /readyz says it.
func (o StoreOutage) Why() string {
	return o.Store + " store unavailable since " + o.Since.UTC().Format(time.RFC3339) + ": " + o.Error
}

// outageErrorAfter is how long an outage lasts before it is logged as an
// error.
const outageErrorAfter = time.Minute

// probeTimeout bounds one probe of a store.
const probeTimeout = 5 * time.Second

// outages follows the outages of the runtime's stores. It is safe for
// concurrent use; its probes run on the runtime's wait group and end when
// the runtime stops.
type outages struct {
	log      *slog.Logger
	failures *prometheus.CounterVec
	probes   map[string]func(ctx context.Context) error // by store
	wg       *sync.WaitGroup
	stop     <-chan struct{}
	n        atomic.Int32 // stores down now: the fast path of wait

	mu   sync.Mutex
	down map[string]*outage
}

type outage struct {
	StoreOutage
	up chan struct{} // closed when the store answers again
}

func newOutages(r *Runtime) *outages {
	o := &outages{log: r.log, wg: &r.wg, stop: r.stopping, down: map[string]*outage{}, probes: map[string]func(context.Context) error{},
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "acemq_store_unavailable_total",
			Help: "Failures of a store of the runtime's own that were its outage (unreachable, connection lost, restarting), by store (idempotency, saga, blob): each held its delivery without spending an attempt and paused the consumers that use the store.",
		}, []string{"store"})}
	r.metrics.reg.MustRegister(o.failures)
	// Each probe asks something harmless that needs the store to answer:
	// any answer but its outage will do.
	if s := r.opts.Store; s != nil {
		o.probes[decide.StoreIdempotency] = func(ctx context.Context) error {
			return s.Release(ctx, "acemq-probe/store", 0) // releases nothing: refused as stale
		}
	}
	if s := r.opts.Sagas; s != nil {
		o.probes[decide.StoreSaga] = func(ctx context.Context) error {
			_, _, err := s.GetSaga(ctx, "acemq-probe")
			return err
		}
	}
	if s := r.opts.Blobs; s != nil {
		o.probes[decide.StoreBlobs] = func(ctx context.Context) error {
			_, err := s.PutBlob(ctx, nil) // the empty blob: put is idempotent by key
			return err
		}
	}
	return o
}

// failed reports err, met in store while a delivery was handled; an outage
// (stores.ErrUnavailable) pauses the consumers that use store until a probe
// of it succeeds. It returns whether err was an outage.
func (o *outages) failed(store string, err error) bool {
	if !errors.Is(err, stores.ErrUnavailable) {
		return false
	}
	if o == nil {
		return true
	}
	o.failures.WithLabelValues(store).Inc()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down[store] != nil {
		return true
	}
	select {
	case <-o.stop:
		// Draining: no probe would be waited for; the deliveries are held.
		return true
	default:
	}
	out := &outage{StoreOutage: StoreOutage{Store: store, Since: time.Now(), Error: err.Error()}, up: make(chan struct{})}
	o.down[store] = out
	o.n.Add(1)
	o.log.Warn("store unavailable; the consumers that use it pause until it answers, spending no attempts", "store", store, "error", err)
	o.wg.Go(func() { o.watch(out) })
	return true
}

// watch probes the store of out until it answers, then resumes the
// consumers waiting for it. It gives up when the runtime stops.
func (o *outages) watch(out *outage) {
	probe := o.probes[out.Store]
	logged := false
	// The first probe goes at once: a failure that was a glitch (a
	// connection the server had dropped, a round trip that timed out)
	// costs a round trip, not a second. Then 1s, 2s, … up to 30s.
	for failed := 0; probe != nil; failed++ {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		err := probe(ctx)
		cancel()
		if !errors.Is(err, stores.ErrUnavailable) {
			break
		}
		if !logged && time.Since(out.Since) >= outageErrorAfter {
			logged = true
			o.log.Error("store still unavailable; the consumers that use it stay paused", "store", out.Store, "duration", time.Since(out.Since).Round(time.Second), "error", err)
		}
		// A little jitter, so that replicas do not probe in step.
		wait := time.Duration(float64(decide.PauseBackoff(failed)) * (0.9 + 0.2*rand.Float64()))
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-o.stop:
			timer.Stop()
			o.end(out)
			return
		}
	}
	o.end(out)
	o.log.Info("store available again; its consumers resume", "store", out.Store, "duration", time.Since(out.Since).Round(time.Millisecond))
}

func (o *outages) end(out *outage) {
	o.mu.Lock()
	if o.down[out.Store] == out {
		delete(o.down, out.Store)
		o.n.Add(-1)
	}
	o.mu.Unlock()
	close(out.up)
}

// wait returns once none of names is down, true; false when ctx ends
// first. A nil outages has nothing down.
func (o *outages) wait(ctx context.Context, names []string) bool {
	for o != nil && o.n.Load() > 0 {
		o.mu.Lock()
		var out *outage
		for _, n := range names {
			if d := o.down[n]; d != nil {
				out = d
				break
			}
		}
		o.mu.Unlock()
		if out == nil {
			return true
		}
		select {
		case <-out.up:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// list returns the stores down now, by name.
func (o *outages) list() []StoreOutage {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var l []StoreOutage
	for _, d := range o.down {
		l = append(l, d.StoreOutage)
	}
	slices.SortFunc(l, func(a, b StoreOutage) int {
		if a.Store < b.Store {
			return -1
		}
		if a.Store > b.Store {
			return 1
		}
		return 0
	})
	return l
}

// StoreOutages returns the runtime's stores that are unavailable now (the
// consumers that use them paused), for readiness and the status page; nil
// when every store answers.
func (r *Runtime) StoreOutages() []StoreOutage {
	return r.outages.list()
}

// needs is which of the runtime's stores the group's deliveries use: the
// stores whose outage pauses it.
func (g *group) needs() []string {
	var n []string
	if g.gate != nil {
		n = append(n, decide.StoreIdempotency)
	}
	if g.saga != nil {
		n = append(n, decide.StoreSaga)
	}
	if g.r.opts.Blobs != nil {
		n = append(n, decide.StoreBlobs)
	}
	return n
}

// storeFailed decides a delivery whose handling failed in store: an outage
// holds it and pauses the consumers that use the store; any other failure
// is retried through its ladder.
func (g *group) storeFailed(in decide.Inbound, store string, err error) decide.Decision {
	f := decide.StoreFailure{Store: store, Err: err, Unavailable: g.r.outages.failed(store, err)}
	return decide.OnStoreFailure(g.c, in, f, time.Now(), rand.Float64())
}
