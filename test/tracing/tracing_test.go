// Package tracing tests the runtime's traces end to end: a pipeline run on
// the real broker through a real plugin process, its spans exported over
// OTLP/HTTP to a receiver the test serves.
package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// span is one exported span, its ids in hex.
type span struct {
	traceID, spanID, parentID string
	name                      string
	kind                      tracepb.Span_SpanKind
	attrs                     map[string]string
	links                     []string // span ids
	status                    tracepb.Status_StatusCode
	service                   string
}

func (s span) String() string {
	return fmt.Sprintf("%s %q (%s, parent %s, links %v)", s.spanID, s.name, s.kind, s.parentID, s.links)
}

// receiver is an OTLP/HTTP trace receiver: it keeps every span it is sent
// and signals each export on got.
type receiver struct {
	mu    sync.Mutex
	spans []span
	got   chan struct{}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []span
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := span{traceID: hex.EncodeToString(s.GetTraceId()), spanID: hex.EncodeToString(s.GetSpanId()),
					parentID: hex.EncodeToString(s.GetParentSpanId()), name: s.GetName(), kind: s.GetKind(),
					attrs: map[string]string{}, status: s.GetStatus().GetCode(), service: service}
				for _, kv := range s.GetAttributes() {
					v := kv.GetValue()
					switch {
					case v.GetStringValue() != "":
						sp.attrs[kv.GetKey()] = v.GetStringValue()
					default:
						sp.attrs[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
					}
				}
				for _, l := range s.GetLinks() {
					sp.links = append(sp.links, hex.EncodeToString(l.GetSpanId()))
				}
				got = append(got, sp)
			}
		}
	}
	rc.mu.Lock()
	rc.spans = append(rc.spans, got...)
	rc.mu.Unlock()
	select {
	case rc.got <- struct{}{}:
	default:
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (rc *receiver) snapshot() []span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]span(nil), rc.spans...)
}

// named returns the spans called name, ordered by their acemq.attempt.
func named(spans []span, name string) []span {
	var out []span
	for _, s := range spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].attrs["acemq.attempt"] < out[j].attrs["acemq.attempt"] })
	return out
}

const flow = `version: acemq.flow/v1
name: traced
defaults:
  retry: {max_attempts: 3, initial_delay: 100ms, max_delay: 100ms, jitter: 0}
plugins:
  tracekit: {command: %s}
pipelines:
  - name: traced
    steps:
      - {name: a, handler: tracekit.echo}
      - {name: b, handler: tracekit.flaky}
      - {name: c, handler: tracekit.echo}
`

// A message sent by a traced client through a 3-step pipeline whose middle
// step fails once makes one connected trace: every span, the plugin's
// included, has the client's trace id; each step's delivery is a child of
// the publish that created its message; the retried delivery is a child
// of that same publish and links to the retry rung's publish; each plugin
// call is a client span under its delivery, and the plugin's own span is
// under the call.
func TestPipelineWithRetryIsOneConnectedTrace(t *testing.T) {
	url := testenv.VHost(t)
	plugin := testenv.GoBuild(t, "", "./test/tracing/testdata/tracekit")

	rc := &receiver{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "acemq-flow-tracing-test")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	tp, err := tracing.FromEnv(t.Context(), "test")
	if err != nil || tp == nil {
		t.Fatalf("tracing.FromEnv with OTEL_EXPORTER_OTLP_ENDPOINT set = %v, %v; want a provider", tp, err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	runtimetest.Start(t, url, fmt.Sprintf(flow, plugin), runtime.Options{Tracing: tp})

	// The client: a span of its own, its context in the message's headers.
	ctx, root := tp.Tracer("client").Start(t.Context(), "send order", trace.WithSpanKind(trace.SpanKindProducer))
	headers := amqp.Table{}
	propagation.TraceContext{}.Inject(ctx, tracing.Carrier(headers))
	ch := testenv.ConfirmedChannel(t, url)
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "traced", "a", true, false, amqp.Publishing{
		MessageId: "m-1", ContentType: "application/json", Headers: headers, Body: []byte(`{"fail_attempts":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("the first message was not confirmed: %v, %v", ok, err)
	}
	root.End()
	traceID := root.SpanContext().TraceID().String()

	// Every span this run makes: the client's, 4 deliveries, 4 calls and
	// the plugin's 4, 3 publishes (a's output, the retry, b's output).
	want := map[string]int{"send order": 1, "process traced.a": 1, "process traced.b": 2, "process traced.c": 1,
		"call tracekit.echo": 2, "call tracekit.flaky": 2, "tracekit echo": 2, "tracekit flaky": 2,
		"publish traced": 2, "publish traced.b.retry.100ms": 1}
	deadline := time.After(60 * time.Second)
	var spans []span
	for {
		_ = tp.ForceFlush(ctx)
		spans = rc.snapshot()
		missing := []string{}
		for name, n := range want {
			if got := len(named(spans, name)); got < n {
				missing = append(missing, fmt.Sprintf("%s: %d of %d", name, got, n))
			}
		}
		if len(missing) == 0 {
			break
		}
		select {
		case <-rc.got:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatalf("spans missing after 60s: %s\ngot:\n%s", strings.Join(missing, "; "), dump(spans))
		}
	}

	for _, s := range spans {
		if s.traceID != traceID {
			t.Errorf("span %s has trace id %s, want the client's %s: the trace is not connected", s, s.traceID, traceID)
		}
	}
	one := func(name string) span { return named(spans, name)[0] }
	sendA := one("send order")
	a := one("process traced.a")
	bs := named(spans, "process traced.b")
	c := one("process traced.c")
	rung := one("publish traced.b.retry.100ms")
	outs := named(spans, "publish traced")
	var outA, outB span
	for _, o := range outs {
		switch o.parentID {
		case a.spanID:
			outA = o
		case bs[1].spanID:
			outB = o
		}
	}
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s; spans:\n%s", what, dump(spans))
		}
	}
	check("step a's delivery is a child of the client's span", a.parentID == sendA.spanID && a.kind == tracepb.Span_SPAN_KIND_CONSUMER)
	check("step a's output is a producer span under its delivery", outA.spanID != "" && outA.kind == tracepb.Span_SPAN_KIND_PRODUCER)
	check("b's first attempt is a child of a's output", bs[0].parentID == outA.spanID && bs[0].attrs["acemq.attempt"] == "1")
	check("b's first attempt is retried, with an error status", bs[0].attrs["acemq.outcome"] == "retried" && bs[0].status == tracepb.Status_STATUS_CODE_ERROR)
	check("the retry's publish is under b's first attempt and links to the message's creation", rung.parentID == bs[0].spanID && contains(rung.links, outA.spanID))
	check("b's second attempt is a child of a's output, not of the retry", bs[1].parentID == outA.spanID && bs[1].attrs["acemq.attempt"] == "2")
	check("b's second attempt links to the retry's publish", contains(bs[1].links, rung.spanID))
	check("b's second attempt is acknowledged", bs[1].attrs["acemq.outcome"] == "acknowledged" && bs[1].status != tracepb.Status_STATUS_CODE_ERROR)
	check("c's delivery is a child of b's output", outB.spanID != "" && c.parentID == outB.spanID && len(c.links) == 0)
	for _, p := range []span{a, bs[0], bs[1], c} {
		check(fmt.Sprintf("%s carries the conventions' attributes", p.name), p.attrs["messaging.system"] == "rabbitmq" &&
			p.attrs["messaging.operation.type"] == "process" && p.attrs["acemq.flow"] == "traced" && p.attrs["acemq.pipeline"] == "traced" &&
			p.attrs["acemq.step"] == strings.TrimPrefix(p.name, "process traced.") && p.service == "acemq-flow-tracing-test")
	}
	check("a's output names its exchange and routing key", outA.attrs["messaging.destination.name"] == "traced" &&
		outA.attrs["messaging.rabbitmq.destination.routing_key"] == "b" && outA.attrs["messaging.operation.type"] == "send")
	for _, handler := range []string{"echo", "flaky"} {
		calls := named(spans, "call tracekit."+handler)
		inside := named(spans, "tracekit "+handler)
		for _, call := range calls {
			check("a plugin call is a client span under a delivery", call.kind == tracepb.Span_SPAN_KIND_CLIENT &&
				(call.parentID == a.spanID || call.parentID == bs[0].spanID || call.parentID == bs[1].spanID || call.parentID == c.spanID))
			n := 0
			for _, s := range inside {
				if s.parentID == call.spanID {
					n++
				}
			}
			check(fmt.Sprintf("the plugin's own span is under the call %s", call), n == 1)
		}
	}
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func dump(spans []span) string {
	var b bytes.Buffer
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	return b.String()
}
