package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/broker"
)

// outageRuntime is a runtime whose connections are fine and whose stores
// are down as the test says.
type outageRuntime struct {
	connRuntime
	down []runtime.StoreOutage
}

func (r *outageRuntime) Ready() bool                         { return len(r.down) == 0 }
func (r *outageRuntime) StoreOutages() []runtime.StoreOutage { return r.down }

func TestReadyzNamesTheStoreThatIsDown(t *testing.T) {
	since := time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC)
	rt := &outageRuntime{connRuntime: connRuntime{conns: []broker.Health{
		{Name: "shop consume", State: "connected", Alive: true, Heartbeat: "5s"},
		{Name: "shop publish", State: "connected", Alive: true, Heartbeat: "5s"},
	}}, down: []runtime.StoreOutage{{Store: "idempotency", Since: since, Error: "postgres store unavailable: dial tcp 127.0.0.1:5432: connect: connection refused"}}}
	srv, err := admin.New(admin.Options{Addr: "127.0.0.1:0", Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "idempotency store unavailable since 2026-12-02T10:15:00Z: postgres store unavailable") {
		t.Errorf("/readyz with the idempotency store down = %d %q, want 503 naming the store and since when", code, body)
	}
	code, body = get("/v1/status")
	var st admin.Status
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("/v1/status = %d %s (%v)", code, body, err)
	}
	if st.Ready || len(st.Stores) != 1 || st.Stores[0].Store != "idempotency" || !st.Stores[0].Since.Equal(since) {
		t.Errorf("/v1/status with the idempotency store down = %s, want not ready and the store listed with since when", body)
	}
	rt.down = nil
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz once the store answers = %d %q, want 200", code, body)
	}
}
