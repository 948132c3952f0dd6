package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
)

// pageRuntime is a Runtime with fixed consumer groups; the methods it does
// not override are never called by the page.
type pageRuntime struct {
	admin.Runtime
	consumers []runtime.ConsumerStatus
}

func (r *pageRuntime) Ready() bool { return true }
func (r *pageRuntime) Consumers(context.Context) []runtime.ConsumerStatus {
	return r.consumers
}

func loadPlan(t *testing.T, dir, file string) *plan.Plan {
	t.Helper()
	set, err := spec.Load(os.DirFS(dir), file)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func fetch(t *testing.T, method, url, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// The page and the reads it polls answer without the token, which still
// guards every change and the other reads; the page loads nothing from
// elsewhere and runs no inline script.
func TestStatusPageIsReadOnlyWithoutTheToken(t *testing.T) {
	pl := loadPlan(t, "../../examples/flows", "place-order.yaml")
	depth := 3
	rt := &pageRuntime{consumers: []runtime.ConsumerStatus{{ID: "place-order.take-payment", Kind: "saga-step", State: "running", Queue: "place-order.take-payment",
		Depth: &depth, Size: 2, Counters: map[string]int64{"acknowledged": 7}}}}
	srv, err := admin.New(admin.Options{Addr: "127.0.0.1:0", Token: "tk", Runtime: rt, Plan: pl})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	resp, body := fetch(t, "GET", ts.URL+"/", "")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, `<script src="page/page.js"></script>`) {
		t.Errorf("GET / without the token = %d %s, want the page:\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("GET /: Content-Security-Policy %q, want the page kept to its own files", csp)
	}
	for _, f := range []struct{ path, ctype, has string }{
		{"/page/page.js", "text/javascript", "textContent"},
		{"/page/page.css", "text/css", "svg .node"},
	} {
		resp, body := fetch(t, "GET", ts.URL+f.path, "")
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), f.ctype) || !strings.Contains(body, f.has) {
			t.Errorf("GET %s = %d %s, want %s holding %q", f.path, resp.StatusCode, resp.Header.Get("Content-Type"), f.ctype, f.has)
		}
		if rest := strings.ReplaceAll(body, "http://www.w3.org/2000/svg", ""); strings.Contains(rest, "http://") || strings.Contains(rest, "https://") {
			t.Errorf("GET %s names another site: the page must load nothing from elsewhere", f.path)
		}
	}
	if resp, _ := fetch(t, "GET", ts.URL+"/page/nothing.js", ""); resp.StatusCode != 404 {
		t.Errorf("GET /page/nothing.js = %d, want 404", resp.StatusCode)
	}
	if resp, _ := fetch(t, "GET", ts.URL+"/nothing", ""); resp.StatusCode != 404 {
		t.Errorf("GET /nothing = %d, want 404: only / is the page", resp.StatusCode)
	}

	resp, body = fetch(t, "GET", ts.URL+"/v1/flows", "")
	var fv admin.FlowsView
	if err := json.Unmarshal([]byte(body), &fv); resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET /v1/flows without the token = %d (%v):\n%s", resp.StatusCode, err, body)
	}
	if !fv.Ready || len(fv.Consumers) != 1 || fv.Consumers[0].Counters["acknowledged"] != 7 || *fv.Consumers[0].Depth != 3 {
		t.Errorf("GET /v1/flows: ready %v, consumers %+v; want ready and the runtime's group", fv.Ready, fv.Consumers)
	}
	nodes := map[string]string{} // consumer → label
	for _, c := range fv.Graph.Clusters {
		for _, n := range c.Nodes {
			if n.Consumer != "" {
				nodes[n.Consumer] = n.Label
			}
		}
	}
	for _, id := range []string{"place-order.take-payment", "place-order.take-payment.compensate", "place-order.book-courier"} {
		if _, ok := nodes[id]; !ok {
			t.Errorf("GET /v1/flows: no node shows consumer %s; nodes with consumers: %v", id, nodes)
		}
	}
	for _, path := range []string{"/v1/schedules", "/v1/sagas", "/v1/delays", "/v1/deadletters"} {
		resp, body := fetch(t, "GET", ts.URL+path, "")
		if resp.StatusCode == http.StatusUnauthorized {
			t.Errorf("GET %s without the token = 401, want it readable as the page's", path)
		}
		if !json.Valid([]byte(body)) {
			t.Errorf("GET %s: not JSON: %s", path, body)
		}
	}
	// Without a store or the broker, the page's sections say what they
	// cannot read.
	if resp, body := fetch(t, "GET", ts.URL+"/v1/schedules", ""); resp.StatusCode != 503 || !strings.Contains(body, "no store to read their ticks from") {
		t.Errorf("GET /v1/schedules with schedules and no store = %d %s, want 503 saying so", resp.StatusCode, body)
	}
	if resp, body := fetch(t, "GET", ts.URL+"/v1/delays", ""); resp.StatusCode != 503 || !strings.Contains(body, "cannot show the delay ladder") {
		t.Errorf("GET /v1/delays without the broker = %d %s, want 503 saying so", resp.StatusCode, body)
	}
	// Changes and the other reads still need the token.
	for _, c := range []struct{ method, path string }{{"POST", "/v1/pause"}, {"POST", "/v1/consumers/place-order.take-payment/stop"}, {"GET", "/v1/consumers"}, {"GET", "/metrics"}, {"GET", "/v1/status"}} {
		if resp, _ := fetch(t, c.method, ts.URL+c.path, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without the token = %d, want 401", c.method, c.path, resp.StatusCode)
		}
	}
}

// GET /v1/sagas counts each saga's instances by state from the store, the
// sagas with unresolved instances first, and lists the unresolved ones
// without their input or any step's output.
func TestStatusPageSagasUnresolvedFirst(t *testing.T) {
	pl := loadPlan(t, "../../examples/flows", "place-order.yaml")
	store, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	mk := func(id string, state stores.SagaState) {
		t.Helper()
		in := stores.SagaInstance{Saga: "place-order", ID: id, State: stores.SagaRunning, Input: []byte(`{"card":"4111-secret-input"}`),
			Steps: []stores.SagaStep{{Name: "take-payment", State: stores.StepPending}, {Name: "reserve-stock", State: stores.StepPending}}}
		got, _, err := store.CreateSaga(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if state == stores.SagaRunning {
			return
		}
		got.State, got.Step = state, 1
		got.Steps[0] = stores.SagaStep{Name: "take-payment", State: stores.StepCompleted, Output: []byte(`{"charge":"secret-output"}`)}
		got.Steps[1] = stores.SagaStep{Name: "reserve-stock", State: stores.StepFailed, Error: "out of chairs"}
		if _, err := store.AdvanceSaga(ctx, got); err != nil {
			t.Fatal(err)
		}
	}
	mk("o-1", stores.SagaRunning)
	mk("o-2", stores.SagaUnresolved)
	mk("o-3", stores.SagaCompleted)
	mk("o-4", stores.SagaUnresolved)
	srv, err := admin.New(admin.Options{Addr: "127.0.0.1:0", Runtime: &pageRuntime{}, Plan: pl, Sagas: store})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	resp, body := fetch(t, "GET", ts.URL+"/v1/sagas", "")
	var v admin.SagasView
	if err := json.Unmarshal([]byte(body), &v); resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET /v1/sagas = %d (%v):\n%s", resp.StatusCode, err, body)
	}
	if len(v.States) == 0 || v.States[0] != stores.SagaUnresolved {
		t.Errorf("GET /v1/sagas: states in the order %v, want unresolved first", v.States)
	}
	if len(v.Sagas) != 1 || v.Sagas[0].States[stores.SagaUnresolved] != 2 || v.Sagas[0].States[stores.SagaRunning] != 1 || v.Sagas[0].States[stores.SagaCompleted] != 1 || v.Sagas[0].States[stores.SagaCompensating] != 0 {
		t.Errorf("GET /v1/sagas: %+v, want place-order with 2 unresolved, 1 running, 1 completed, 0 compensating", v.Sagas)
	}
	if len(v.Unresolved) != 2 || v.Unresolved[0].Step != "reserve-stock" || v.Unresolved[0].Error != "out of chairs" || v.Unresolved[0].Started == "" {
		t.Errorf("GET /v1/sagas: unresolved %+v, want o-4 and o-2 at reserve-stock, failed with out of chairs", v.Unresolved)
	}
	if strings.Contains(body, "secret-input") || strings.Contains(body, "secret-output") {
		t.Errorf("GET /v1/sagas shows an instance's input or a step's output:\n%s", body)
	}
}

// The page's reads are cached: however often pages poll, the runtime is
// asked at most once a second.
func TestStatusPageReadsAreShared(t *testing.T) {
	rt := &countingRuntime{}
	srv, err := admin.New(admin.Options{Addr: "127.0.0.1:0", Runtime: rt, Plan: &plan.Plan{}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	start := time.Now()
	for range 20 {
		if resp, body := fetch(t, "GET", ts.URL+"/v1/flows", ""); resp.StatusCode != 200 {
			t.Fatalf("GET /v1/flows = %d %s", resp.StatusCode, body)
		}
	}
	// Twenty reads within a second make one listing, two if they straddle
	// the second.
	if n, limit := rt.calls, int(time.Since(start)/time.Second)+2; n < 1 || n > limit {
		t.Errorf("20 GET /v1/flows listed the consumers %d times, want 1 to %d", n, limit)
	}
}

type countingRuntime struct {
	pageRuntime
	calls int
}

func (r *countingRuntime) Consumers(context.Context) []runtime.ConsumerStatus {
	r.calls++
	return []runtime.ConsumerStatus{}
}
