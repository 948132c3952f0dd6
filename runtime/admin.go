package runtime

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ErrAdminExposed is returned by New when the admin listener is bound
// beyond loopback without a token.
var ErrAdminExposed = errors.New("the admin listener is bound beyond loopback without a token")

// checkAdminExposure refuses an admin listener that anyone on the network
// could use to stop consumers: bound anywhere but loopback, every call that
// changes something needs a bearer token.
func checkAdminExposure(opts Options) error {
	if opts.AdminAddr == "" || opts.AdminToken != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(opts.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin address %q: %w", opts.AdminAddr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w (%s); set --admin-token or ACEMQ_ADMIN_TOKEN, or bind to 127.0.0.1", ErrAdminExposed, opts.AdminAddr)
}

// adminHandler serves health, readiness, metrics and the consumer registry.
// Nothing here ever shows a payload or a credential.
func (r *Runtime) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	// With a token, everything but health and readiness needs it: metrics
	// and the registry say what runs, and each listing asks the broker for
	// every queue's depth.
	guarded := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			if !r.authorized(req) {
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "this call needs the admin bearer token (Authorization: Bearer <token>)"})
				return
			}
			h(w, req)
		}
	}
	metrics := promhttp.HandlerFor(r.metrics.reg, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", guarded(metrics.ServeHTTP))
	mux.HandleFunc("GET /v1/consumers", guarded(func(w http.ResponseWriter, req *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"consumers": r.Consumers(req.Context())})
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
			Target  Target          `json:"target"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 16<<20)).Decode(&body); err != nil {
			writeError(w, badRequest{fmt.Errorf("the body is not {\"target\": {...}, \"payload\": ...}: %w", err)})
			return
		}
		msg, err := FirstMessage(r.plan, body.Target, body.Payload, time.Now())
		if err != nil {
			writeError(w, badRequest{err})
			return
		}
		writeJSON(w, http.StatusOK, WireMessageOf(msg))
	}))
	change := func(pattern string, fn func(req *http.Request) error) {
		mux.HandleFunc("POST "+pattern, func(w http.ResponseWriter, req *http.Request) {
			if !r.authorized(req) {
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
	return mux
}

func (r *Runtime) authorized(req *http.Request) bool {
	if r.opts.AdminToken == "" {
		return true // loopback only, checked by New
	}
	got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(r.opts.AdminToken)) == 1
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
	case errors.Is(err, ErrUnknownConsumer):
		code = http.StatusNotFound
	case errors.As(err, &br), errors.Is(err, ErrGroupSize), errors.Is(err, ErrTooManyConsumers):
		code = http.StatusBadRequest
	case errors.Is(err, ErrNotStarted), errors.Is(err, ErrShuttingDown):
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
