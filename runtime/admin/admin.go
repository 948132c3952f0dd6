// Package admin is the runtime's admin API: health, readiness, metrics, the
// consumer registry and the first message of a run, served over HTTP, and
// the client the CLI calls it with. It serves the engine through an
// interface of its own; the engine knows nothing of it.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/scheduler"
)

// Runtime is what the admin API serves: readiness and the consumer
// registry. *runtime.Runtime is one.
type Runtime interface {
	Ready() bool
	Consumers(ctx context.Context) []runtime.ConsumerStatus
	Consumer(ctx context.Context, id string) (runtime.ConsumerStatus, error)
	Start(ctx context.Context, id string) error
	Stop(id string) error
	Scale(id string, n int) error
	Prefetch(id string, n int) error
	Pause() error
	Resume(ctx context.Context) error
}

// Connections is what a Runtime serves when it also says how its broker
// connections are (*runtime.Runtime does): /readyz then says why it is not
// ready, and /v1/status shows them.
type Connections interface {
	Connections() []broker.Health
}

// StoreOutages is what a Runtime serves when it also says which of its
// stores are unavailable (*runtime.Runtime does): /readyz then names them,
// and /v1/status lists them.
type StoreOutages interface {
	StoreOutages() []runtime.StoreOutage
}

// Stalls is what a Runtime serves when it also says which of its consumer
// groups are stalled, holding deliveries and finishing none
// (*runtime.Runtime does): /readyz then names them, and /v1/status lists
// them.
type Stalls interface {
	Stalls() []runtime.Stall
}

// Status is what GET /v1/status answers: readiness, each broker
// connection's health, "blocked" with since when while a resource alarm
// holds it, the runtime's stores that are unavailable, and its stalled
// consumer groups.
type Status struct {
	Ready       bool                  `json:"ready"`
	Why         []string              `json:"why,omitempty"` // why not ready, one sentence a connection, store or stalled consumer
	Connections []broker.Health       `json:"connections"`
	Stores      []runtime.StoreOutage `json:"stores_unavailable,omitempty"`
	Stalled     []runtime.Stall       `json:"stalled,omitempty"`
}

// status builds the Status of r.
func status(r Runtime) Status {
	st := Status{Ready: r.Ready(), Connections: []broker.Health{}}
	if cs, ok := r.(Connections); ok {
		st.Connections = append(st.Connections, cs.Connections()...)
	}
	for _, h := range st.Connections {
		if why := h.Why(); why != "" {
			st.Why = append(st.Why, why)
		}
	}
	if so, ok := r.(StoreOutages); ok {
		st.Stores = so.StoreOutages()
		for _, o := range st.Stores {
			st.Why = append(st.Why, o.Why())
		}
	}
	if ss, ok := r.(Stalls); ok {
		st.Stalled = ss.Stalls()
		for _, s := range st.Stalled {
			st.Why = append(st.Why, s.Why())
		}
	}
	return st
}

// Options configure a Server.
type Options struct {
	Addr    string // host:port to listen on
	Token   string // bearer token every endpoint but /healthz, /readyz and the status page's reads needs; required beyond loopback
	Runtime Runtime
	// Plan is the plan the runtime runs: /v1/messages/first builds the
	// first message of a run from it.
	Plan *plan.Plan
	// Metrics is what /metrics serves.
	Metrics prometheus.Gatherer
	// Registry, when set, is served at the root as the Confluent Schema
	// Registry REST API (registry.go): /schemas/ids/{id}, /subjects/...,
	// /compatibility/..., /config. Every stores.Set is one.
	Registry Registry
	// Ticks, Sagas and Broker are what the status page reads beside the
	// engine (page.go): the store the plan's schedules claim their ticks
	// in (GET /v1/schedules), the store of its sagas' instances (GET
	// /v1/sagas), and the broker's delay ladder and dead letters (GET
	// /v1/delays, GET /v1/deadletters). Each may be nil: its endpoint then
	// shows nothing, or says what it cannot read.
	Ticks  scheduler.LastTicks
	Sagas  SagaStore
	Broker BrokerReads
	Log    *slog.Logger // nil discards
}

// Server serves the admin API.
//
// Lifecycle: New checks the options (no I/O); Listen binds the address, so
// that a taken port fails the start before anything else runs; Serve
// answers until its context ends, then shuts down.
type Server struct {
	opts Options
	ln   net.Listener
}

// New checks opts. It refuses an address beyond loopback without a token.
func New(opts Options) (*Server, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if err := CheckExposure(opts.Addr, opts.Token); err != nil {
		return nil, err
	}
	return &Server{opts: opts}, nil
}

// Listen binds the server's address.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("admin listener on %s: %w", s.opts.Addr, err)
	}
	s.ln = ln
	s.opts.Log.Info("admin listening", "addr", ln.Addr().String())
	return nil
}

// Addr is the address the server listens on, once Listen has bound it.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Serve answers calls until ctx is done, then stops within two seconds. It
// calls Listen first when it has not been called.
func (s *Server) Serve(ctx context.Context) error {
	if s.ln == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	// Bounded reads and idle connections: a client cannot hold the
	// listener open by trickling a request or keeping connections.
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
	var served sync.WaitGroup
	served.Go(func() { _ = srv.Serve(s.ln) })
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	served.Wait()
	return nil
}

// ErrExposed is returned by New when the admin listener is bound beyond
// loopback without a token.
var ErrExposed = errors.New("the admin listener is bound beyond loopback without a token")

// CheckExposure refuses an admin listener at addr that anyone on the
// network could use to read the registry and metrics or stop consumers:
// bound anywhere but loopback, it needs a bearer token.
func CheckExposure(addr, token string) error {
	if addr == "" || token != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("admin address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w (%s); set --admin-token or ACEMQ_ADMIN_TOKEN, or bind to 127.0.0.1", ErrExposed, addr)
}

// Handler serves health, readiness, metrics, the consumer registry, the
// first message of a run and the status page (page.go). Nothing here ever
// shows a credential, or more of a payload than inspect's preview.
func (s *Server) Handler() http.Handler {
	r := s.opts.Runtime
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if st := status(r); !st.Ready {
			text := "not ready"
			if len(st.Why) > 0 {
				text += ": " + strings.Join(st.Why, "; ")
			}
			http.Error(w, text, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	// With a token, everything but health and readiness needs it: metrics
	// and the registry say what runs, and each listing asks the broker for
	// every queue's depth.
	guarded := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			if !s.authorized(req) {
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "this call needs the admin bearer token (Authorization: Bearer <token>)"})
				return
			}
			h(w, req)
		}
	}
	metrics := promhttp.HandlerFor(s.opts.Metrics, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", guarded(metrics.ServeHTTP))
	mux.HandleFunc("GET /v1/consumers", guarded(func(w http.ResponseWriter, req *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"consumers": r.Consumers(req.Context())})
	}))
	mux.HandleFunc("GET /v1/status", guarded(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, status(r))
	}))
	mux.HandleFunc("GET /v1/consumers/{id}", guarded(func(w http.ResponseWriter, req *http.Request) {
		st, err := r.Consumer(req.Context(), req.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	}))
	mux.HandleFunc("POST /v1/messages/first", guarded(func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			Target  decide.Target   `json:"target"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 16<<20)).Decode(&body); err != nil {
			writeError(w, badRequest{fmt.Errorf("the body is not {\"target\": {...}, \"payload\": ...}: %w", err)})
			return
		}
		msg, err := decide.FirstMessage(s.opts.Plan, body.Target, body.Payload, time.Now())
		if err != nil {
			writeError(w, badRequest{err})
			return
		}
		if enc, ok := r.(FirstEncoder); ok {
			if msg, err = enc.EncodeFirst(req.Context(), body.Target, msg); err != nil {
				writeError(w, firstEncodeError(err))
				return
			}
		}
		writeJSON(w, http.StatusOK, WireMessageOf(msg))
	}))
	change := func(pattern string, fn func(req *http.Request) error) {
		mux.HandleFunc("POST "+pattern, func(w http.ResponseWriter, req *http.Request) {
			if !s.authorized(req) {
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "this call changes the runtime and needs the admin bearer token"})
				return
			}
			if err := fn(req); err != nil {
				writeError(w, err)
				return
			}
			writeJSON(w, http.StatusOK, map[string]string{"result": "ok"})
		})
	}
	change("/v1/consumers/{id}/start", func(req *http.Request) error { return r.Start(req.Context(), req.PathValue("id")) })
	change("/v1/consumers/{id}/stop", func(req *http.Request) error { return r.Stop(req.PathValue("id")) })
	change("/v1/consumers/{id}/scale", func(req *http.Request) error {
		n, err := intParam(req, "size")
		if err != nil {
			return err
		}
		return r.Scale(req.PathValue("id"), n)
	})
	change("/v1/consumers/{id}/prefetch", func(req *http.Request) error {
		n, err := intParam(req, "prefetch")
		if err != nil {
			return err
		}
		return r.Prefetch(req.PathValue("id"), n)
	})
	change("/v1/pause", func(*http.Request) error { return r.Pause() })
	change("/v1/resume", func(req *http.Request) error { return r.Resume(req.Context()) })
	if s.opts.Registry != nil {
		s.registryRoutes(mux)
	}
	s.pageRoutes(mux)
	return mux
}

func (s *Server) authorized(req *http.Request) bool {
	if s.opts.Token == "" {
		return true // loopback only, checked by New
	}
	got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) == 1
}

// badRequest marks an error caused by the caller's input.
type badRequest struct{ error }

func intParam(req *http.Request, name string) (int, error) {
	raw := req.URL.Query().Get(name)
	if raw == "" {
		var body map[string]int
		if err := json.NewDecoder(io.LimitReader(req.Body, 4<<10)).Decode(&body); err == nil {
			if n, ok := body[name]; ok {
				return n, nil
			}
		}
		return 0, badRequest{fmt.Errorf("give %s as ?%s=N or a JSON body {\"%s\": N}", name, name, name)}
	}
	n, err := strconv.Atoi(raw)
	if err != nil {
		return 0, badRequest{fmt.Errorf("%s %q is not a whole number", name, raw)}
	}
	return n, nil
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusConflict
	var br badRequest
	switch {
	case errors.Is(err, runtime.ErrUnknownConsumer):
		code = http.StatusNotFound
	case errors.As(err, &br), errors.Is(err, runtime.ErrGroupSize), errors.Is(err, runtime.ErrTooManyConsumers), errors.Is(err, runtime.ErrOutOfRange):
		code = http.StatusBadRequest
	case errors.Is(err, runtime.ErrNotStarted), errors.Is(err, runtime.ErrShuttingDown):
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
