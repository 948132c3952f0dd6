package admin_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

const registryFlow = `version: acemq.flow/v1
name: reg
plugins:
  k: {command: ./not-started}
pipelines:
  - name: p
    steps:
      - {name: a, handler: k.echo, concurrency: 2}
`

// echo returns its payload.
var echo = runtimetest.Echo

func TestAdminAPIServesMetricsAndGuardsChanges(t *testing.T) {
	url := testenv.VHost(t)
	rt, pl := runtimetest.Start(t, url, registryFlow, runtime.Options{Handlers: map[string]runtime.HandlerFunc{"k.echo": echo}})
	addr := runtimetest.Admin(t, rt, pl, "s3cret")
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if err := ch.Publish("p", "a", false, false, amqp.Publishing{MessageId: "m-1", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	getAs := func(path, token string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	get := func(path string) (int, string) { return getAs(path, "s3cret") }
	// With a token, only health and readiness answer without it: metrics
	// and the registry say what runs.
	for _, path := range []string{"/metrics", "/v1/consumers", "/v1/consumers/p.a"} {
		if code, _ := getAs(path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token = %d, want 401", path, code)
		}
	}
	if code, _ := getAs("/healthz", ""); code != 200 {
		t.Errorf("GET /healthz without the token = %d, want 200", code)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, body := get("/metrics"); !strings.Contains(body, `acemq_messages_total{consumer="p.a",outcome="acknowledged"} 1`) {
			return testenv.Errorf("metrics lack the acknowledged message")
		}
		return nil
	})
	_, body := get("/metrics")
	for _, want := range []string{"acemq_handler_duration_seconds_bucket", "acemq_messages_in_flight", "acemq_broker_reconnects_total"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code, body := get("/v1/consumers"); code != 200 || !strings.Contains(body, `"id": "p.a"`) || !strings.Contains(body, `"acknowledged": 1`) {
		t.Errorf("/v1/consumers = %d %s", code, body)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz = %d, want 200", code)
	}
	if code, body := get("/v1/status"); code != 200 || !strings.Contains(body, `"ready": true`) || strings.Count(body, `"alive": true`) != 2 || strings.Contains(body, `"blocked": true`) {
		t.Errorf("/v1/status = %d %s, want ready with both connections alive and not blocked", code, body)
	}
	if code, _ := getAs("/v1/status", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/status without the token = %d, want 401", code)
	}
	post := func(path, token string) int {
		req, _ := http.NewRequest("POST", "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/v1/consumers/p.a/stop", ""); code != http.StatusUnauthorized {
		t.Errorf("stop without the token = %d, want 401", code)
	}
	if code := post("/v1/consumers/p.a/stop", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("stop with a wrong token = %d, want 401", code)
	}
	if code := post("/v1/consumers/p.a/scale?size=0", "s3cret"); code != http.StatusBadRequest {
		t.Errorf("scale to 0 = %d, want 400", code)
	}
	if code := post("/v1/consumers/p.a/scale?size=2", "s3cret"); code != 200 {
		t.Errorf("scale with the token = %d, want 200", code)
	}
	if code := post("/v1/consumers/ghost/stop", "s3cret"); code != http.StatusNotFound {
		t.Errorf("stop of an unknown consumer = %d, want 404", code)
	}
	if strings.Contains(body, "s3cret") || strings.Contains(body, "guest:guest") {
		t.Error("/metrics shows a credential")
	}
}

func TestAdminBeyondLoopbackNeedsAToken(t *testing.T) {
	_, err := admin.New(admin.Options{Addr: "0.0.0.0:9464"})
	if !errors.Is(err, admin.ErrExposed) {
		t.Errorf("New with --admin 0.0.0.0 and no token = %v, want ErrExposed", err)
	}
	if _, err := admin.New(admin.Options{Addr: "0.0.0.0:9464", Token: "t"}); err != nil {
		t.Errorf("with a token: %v", err)
	}
	if _, err := admin.New(admin.Options{Addr: "127.0.0.1:9464"}); err != nil {
		t.Errorf("loopback without a token: %v", err)
	}
}
