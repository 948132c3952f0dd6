package admin

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/scheduler"
	"github.com/acemq/acemq-flow/stores"
)

// The status page (issue 21): static files embedded in the binary, no
// build step and nothing fetched from elsewhere, polling the read-only
// JSON endpoints below every two seconds. Neither the page nor those
// endpoints need the admin token: they change nothing, and show no
// credential and no more of a payload than inspect's preview. What changes
// the runtime keeps needing the token.
//
//go:embed page
var pageFiles embed.FS

// SagaStore is what GET /v1/sagas reads of the saga store: the instances
// counted by saga and state, and the unresolved ones. Every stores.Set is
// one.
type SagaStore interface {
	CountSagas(ctx context.Context) ([]stores.SagaCount, error)
	ListSagas(ctx context.Context, f stores.SagaFilter) ([]stores.SagaInstance, error)
}

// BrokerReads is what the status page reads of the broker beside the
// engine: the delay ladder (each level's depth and head, `.due`, the
// unroutable count; `acemq-flow delays --format json`) and the dead
// letters of the plan's consumer groups, grouped by flow, consumer and
// error, with each group's first messages as `inspect` shows them. Each
// answer is served as JSON as it is. `acemq-flow run` passes
// ops.StatusReads on its broker. Implementations are safe for concurrent
// use and show no credential.
type BrokerReads interface {
	Delays(ctx context.Context) (any, error)
	DeadLetters(ctx context.Context) (any, error)
}

// unresolvedListed is how many unresolved saga instances the page lists,
// the newest first.
const unresolvedListed = 20

// FlowsView is what GET /v1/flows answers: readiness, the flows drawn from
// the plan's graph model, and every consumer group's live numbers.
type FlowsView struct {
	At        string                   `json:"at"` // RFC 3339 UTC
	Ready     bool                     `json:"ready"`
	Why       []string                 `json:"why,omitempty"`
	Graph     GraphView                `json:"graph"`
	Consumers []runtime.ConsumerStatus `json:"consumers"`
}

// GraphView is plan.Graph as JSON: a cluster per pipeline, itinerary and
// saga (and one of the consumers), the nodes outside any (exchanges,
// schedules) and the edges between nodes.
type GraphView struct {
	Clusters []ClusterView `json:"clusters"`
	Loose    []NodeView    `json:"loose"`
	Edges    []EdgeView    `json:"edges"`
}

// ClusterView is one cluster of the graph.
type ClusterView struct {
	ID    string     `json:"id"`
	Label string     `json:"label"`
	Nodes []NodeView `json:"nodes"`
}

// NodeView is one node; Consumer is the registry id of the consumer group
// whose numbers it shows, empty for a node without one.
type NodeView struct {
	ID       string `json:"id"`
	Label    string `json:"label"`
	Shape    string `json:"shape"`
	Consumer string `json:"consumer,omitempty"`
}

// EdgeView is one edge.
type EdgeView struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Label  string `json:"label,omitempty"`
	Dashed bool   `json:"dashed,omitempty"`
}

// graphView converts the plan's graph model.
func graphView(pl *plan.Plan) GraphView {
	v := GraphView{Clusters: []ClusterView{}, Loose: []NodeView{}, Edges: []EdgeView{}}
	if pl == nil {
		return v
	}
	g := plan.BuildGraph(pl)
	node := func(n plan.Node) NodeView {
		return NodeView{ID: n.ID, Label: n.Label, Shape: n.Shape, Consumer: n.Consumer}
	}
	for _, c := range g.Clusters {
		cv := ClusterView{ID: c.ID, Label: c.Label, Nodes: []NodeView{}}
		for _, n := range c.Nodes {
			cv.Nodes = append(cv.Nodes, node(n))
		}
		v.Clusters = append(v.Clusters, cv)
	}
	for _, n := range g.Loose {
		v.Loose = append(v.Loose, node(n))
	}
	for _, e := range g.Edges {
		v.Edges = append(v.Edges, EdgeView{From: e.From, To: e.To, Label: e.Label, Dashed: e.Dashed})
	}
	return v
}

// SagasView is what GET /v1/sagas answers: each saga's instances by state,
// sagas with unresolved instances first, and the newest unresolved ones.
type SagasView struct {
	At         string             `json:"at"`
	Sagas      []SagaStates       `json:"sagas"`
	Unresolved []UnresolvedSaga   `json:"unresolved"`
	States     []stores.SagaState `json:"states"` // the order the page shows them in: unresolved first
}

// SagaStates is how many instances of one saga are in each state.
type SagaStates struct {
	Saga   string                     `json:"saga"`
	States map[stores.SagaState]int64 `json:"states"`
}

// UnresolvedSaga is an instance that ended unresolved: its effects were
// not all undone, and a person has to look (`acemq-flow sagas show ID`).
// It holds no input and no step output.
type UnresolvedSaga struct {
	Saga    string `json:"saga"`
	ID      string `json:"id"`
	Step    string `json:"step,omitempty"`  // the step reached
	Error   string `json:"error,omitempty"` // the last failure recorded
	Started string `json:"started_at"`
	Ended   string `json:"ended_at,omitempty"`
}

// sagaStateOrder is the order the page lists states in: what needs a
// person first, then what still runs, then what ended well.
var sagaStateOrder = []stores.SagaState{stores.SagaUnresolved, stores.SagaCompensating, stores.SagaRunning, stores.SagaCompensated, stores.SagaCompleted}

// sagas counts the instances of pl's sagas in st.
func sagas(ctx context.Context, st SagaStore, pl *plan.Plan) (SagasView, error) {
	v := SagasView{At: nowText(), Sagas: []SagaStates{}, Unresolved: []UnresolvedSaga{}, States: sagaStateOrder}
	if pl == nil || len(pl.Sagas) == 0 || st == nil {
		return v, nil
	}
	by := map[string]*SagaStates{}
	for _, s := range pl.Sagas {
		ss := SagaStates{Saga: s.Name, States: map[stores.SagaState]int64{}}
		for _, state := range sagaStateOrder {
			ss.States[state] = 0
		}
		v.Sagas = append(v.Sagas, ss)
	}
	for i := range v.Sagas {
		by[v.Sagas[i].Saga] = &v.Sagas[i]
	}
	counts, err := st.CountSagas(ctx)
	if err != nil {
		return v, fmt.Errorf("count the saga instances in the store: %w", err)
	}
	for _, c := range counts {
		if ss := by[c.Saga]; ss != nil {
			ss.States[c.State] = c.Instances
		}
	}
	slices.SortStableFunc(v.Sagas, func(a, b SagaStates) int {
		return cmp.Compare(b.States[stores.SagaUnresolved], a.States[stores.SagaUnresolved])
	})
	insts, err := st.ListSagas(ctx, stores.SagaFilter{State: stores.SagaUnresolved, Limit: unresolvedListed, Newest: true})
	if err != nil {
		return v, fmt.Errorf("list the unresolved saga instances in the store: %w", err)
	}
	for _, in := range insts {
		if by[in.Saga] == nil {
			continue // another runtime's saga
		}
		u := UnresolvedSaga{Saga: in.Saga, ID: in.ID, Started: timeText(in.StartedAt), Ended: timeText(in.EndedAt)}
		if in.Step >= 0 && in.Step < len(in.Steps) {
			u.Step = in.Steps[in.Step].Name
		}
		for _, s := range in.Steps {
			if s.Error != "" {
				u.Error = s.Error
			}
		}
		v.Unresolved = append(v.Unresolved, u)
	}
	return v, nil
}

func nowText() string { return timeText(time.Now()) }

// timeText is t in RFC 3339 UTC with milliseconds, "" for the zero time.
func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)
}

// cached is one answer of the page's endpoints, kept for maxAge: however
// many pages poll, the broker and the store are asked at most once per
// maxAge, callers arriving meanwhile waiting for the one read.
type cached[T any] struct {
	maxAge time.Duration
	mu     sync.Mutex
	at     time.Time
	v      T
	err    error
}

func (c *cached[T]) get(ctx context.Context, read func(ctx context.Context) (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.maxAge {
		return c.v, c.err
	}
	// One read serves every caller: it does not end with the first
	// caller's request.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	c.v, c.err = read(rctx)
	c.at = time.Now()
	return c.v, c.err
}

// pageJSON answers GET with what read returns through cache c: 200 with
// it, or 503 with {"error": ...} when it could not be read.
func pageJSON[T any](c *cached[T], read func(ctx context.Context) (T, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		v, err := c.get(req.Context(), read)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// pageHeaders keeps the page to its own files: no script, style or frame
// from anywhere else, and no inline script.
func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

// pageRoutes registers the status page and the read-only endpoints it
// polls.
func (s *Server) pageRoutes(mux *http.ServeMux) {
	static, err := fs.Sub(pageFiles, "page")
	if err != nil {
		panic(err) // the embedded folder is part of the binary
	}
	index, err := fs.ReadFile(static, "index.html")
	if err != nil {
		panic(err)
	}
	files := http.FileServerFS(static)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		pageHeaders(w)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(index)
	})
	mux.Handle("GET /page/", http.StripPrefix("/page/", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		pageHeaders(w)
		files.ServeHTTP(w, req)
	})))

	r, pl := s.opts.Runtime, s.opts.Plan
	graph := graphView(pl)
	flows := &cached[FlowsView]{maxAge: time.Second}
	mux.HandleFunc("GET /v1/flows", pageJSON(flows, func(ctx context.Context) (FlowsView, error) {
		st := status(r)
		return FlowsView{At: nowText(), Ready: st.Ready, Why: st.Why, Graph: graph, Consumers: r.Consumers(ctx)}, nil
	}))
	schedules := &cached[scheduler.View]{maxAge: time.Second}
	mux.HandleFunc("GET /v1/schedules", pageJSON(schedules, func(ctx context.Context) (scheduler.View, error) {
		var ss []plan.Schedule
		if pl != nil {
			ss = pl.Schedules
		}
		if len(ss) == 0 {
			return scheduler.View{At: nowText(), Schedules: []scheduler.ScheduleView{}}, nil
		}
		if s.opts.Ticks == nil {
			return scheduler.View{}, errors.New("the runtime has schedules but its admin API has no store to read their ticks from; list them with acemq-flow schedules --store URL PATH")
		}
		return scheduler.ViewAt(ctx, s.opts.Ticks, ss, time.Now())
	}))
	delays := &cached[any]{maxAge: 5 * time.Second}
	mux.HandleFunc("GET /v1/delays", pageJSON(delays, func(ctx context.Context) (any, error) {
		if s.opts.Broker == nil {
			return nil, errors.New("this admin API reads nothing of the broker beside the engine; it cannot show the delay ladder")
		}
		return s.opts.Broker.Delays(ctx)
	}))
	dead := &cached[any]{maxAge: 5 * time.Second}
	mux.HandleFunc("GET /v1/deadletters", pageJSON(dead, func(ctx context.Context) (any, error) {
		if s.opts.Broker == nil {
			return nil, errors.New("this admin API reads nothing of the broker beside the engine; it cannot show the dead letters")
		}
		return s.opts.Broker.DeadLetters(ctx)
	}))
	sagaCounts := &cached[SagasView]{maxAge: 5 * time.Second}
	mux.HandleFunc("GET /v1/sagas", pageJSON(sagaCounts, func(ctx context.Context) (SagasView, error) {
		return sagas(ctx, s.opts.Sagas, pl)
	}))
}
