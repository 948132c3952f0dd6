package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/broker"
)

// connRuntime is a Runtime whose connections are what the test says; the
// methods it does not override are never called here.
type connRuntime struct {
	admin.Runtime
	conns []broker.Health
}

func (r *connRuntime) Ready() bool {
	for _, h := range r.conns {
		if !h.Ready() {
			return false
		}
	}
	return true
}

func (r *connRuntime) Connections() []broker.Health { return r.conns }

func TestStatusSaysBlockedWithSinceWhen(t *testing.T) {
	since := time.Date(2026, 12, 2, 8, 15, 0, 0, time.UTC)
	rt := &connRuntime{conns: []broker.Health{
		{Name: "shop consume", State: "connected", Alive: true, Heartbeat: "5s"},
		{Name: "shop publish", State: "connected", Alive: true, Heartbeat: "5s", Blocked: true, BlockedSince: &since, BlockedReason: "low on memory"},
	}}
	srv, err := admin.New(admin.Options{Addr: "127.0.0.1:0", Token: "t", Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `connection "shop publish" is blocked by the broker since 2026-12-02T08:15:00Z (low on memory)`) {
		t.Errorf("/readyz while blocked = %d %q, want 503 naming the connection, since when and the alarm", code, body)
	}
	code, body = get("/v1/status")
	var st admin.Status
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("/v1/status = %d %s (%v)", code, body, err)
	}
	if st.Ready || len(st.Connections) != 2 || !st.Connections[1].Blocked || st.Connections[1].BlockedSince == nil || !st.Connections[1].BlockedSince.Equal(since) || len(st.Why) != 1 {
		t.Errorf("/v1/status while blocked = %s", body)
	}
	if !strings.Contains(body, `"blocked": true`) || !strings.Contains(body, `"blocked_since": "2026-12-02T08:15:00Z"`) {
		t.Errorf("/v1/status does not say blocked with since when: %s", body)
	}
	resp, err := http.Get(ts.URL + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/v1/status without the token = %d, want 401", resp.StatusCode)
	}

	rt.conns[1] = broker.Health{Name: "shop publish", State: "connected", Alive: false, Heartbeat: "2s",
		Unproven: "no frame from the broker since the process resumed from a stall; waiting for its heartbeat"}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not proven alive: no frame from the broker since the process resumed") {
		t.Errorf("/readyz after a stall = %d %q, want 503 saying the connection is not proven alive", code, body)
	}
	rt.conns[1] = broker.Health{Name: "shop publish", State: "connected", Alive: true, Heartbeat: "2s"}
	if code, body := get("/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz with both connections proven = %d %q, want 200 ready", code, body)
	}
	if _, body := get("/v1/status"); strings.Contains(body, "blocked_since") || !strings.Contains(body, `"ready": true`) {
		t.Errorf("/v1/status once unblocked = %s", body)
	}
}
