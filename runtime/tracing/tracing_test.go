package tracing_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/runtime/tracing"
)

func spanContext(t *testing.T, traceID, spanID string) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex(spanID)
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

const (
	traceA   = "0af7651916cd43dd8448eb211c80319c"
	creation = "b7ad6b7169203331"
	retry    = "00f067aa0ba902b7"
	step     = "53995c3f42cd8ad8"
)

// The carrier reads and writes W3C trace context in an AMQP table: text
// and bytes values read as text, anything else as missing, and what it
// writes the propagator reads back.
func TestCarrierRoundTripsThroughAnAMQPTable(t *testing.T) {
	h := amqp.Table{"traceparent": []byte("00-" + traceA + "-" + creation + "-01"), "x-acemq-attempt": int64(2)}
	c := tracing.Carrier(h)
	if got := c.Get("x-acemq-attempt"); got != "" {
		t.Errorf("Get of an integer header = %q, want \"\"", got)
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), c)
	if sc := trace.SpanContextFromContext(ctx); sc.TraceID().String() != traceA || sc.SpanID().String() != creation || !sc.IsRemote() {
		t.Fatalf("Extract(traceparent as bytes) = %v, want trace %s span %s, remote", sc, traceA, creation)
	}
	out := amqp.Table{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), spanContext(t, traceA, step)), tracing.Carrier(out))
	if got, want := out["traceparent"], "00-"+traceA+"-"+step+"-01"; got != want {
		t.Errorf("Inject wrote traceparent %v, want %q (a string)", got, want)
	}
	keys := tracing.Carrier(h).Keys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"traceparent", "x-acemq-attempt"}) {
		t.Errorf("Keys() = %v, want every header", keys)
	}
}

// Outgoing and Extract decide, between them, whether a delivery's span is
// a child or a link of the span before it.
func TestParentOrLink(t *testing.T) {
	created := "00-" + traceA + "-" + creation + "-01"
	cases := []struct {
		name       string
		in         map[string]any
		span       string // the publishing span
		republish  bool
		wantParent string // span id the next delivery is a child of
		wantLink   string // span id it links to ("": none)
	}{
		{name: "a step's output is a new message: a 1:1 hop is a child, with no link", in: map[string]any{"traceparent": created, "x-acemq-trace-link": "00-" + traceA + "-" + retry + "-01", "tracestate": "k=v"},
			span: step, wantParent: step},
		{name: "a retry keeps the creation context and links to the retry's publish", in: map[string]any{"traceparent": created},
			span: retry, republish: true, wantParent: creation, wantLink: retry},
		{name: "a republish of a message nobody traced makes its publish both creation and previous hop, so no link", in: map[string]any{},
			span: retry, republish: true, wantParent: retry},
		{name: "a second republish (a replay after .dlq) replaces the link, never the parent", in: map[string]any{"traceparent": created, "x-acemq-trace-link": "00-" + traceA + "-" + retry + "-01"},
			span: step, republish: true, wantParent: creation, wantLink: step},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(tc.in)
			out := tracing.Outgoing(tc.in, spanContext(t, traceA, tc.span), tc.republish)
			if len(tc.in) != before {
				t.Errorf("Outgoing changed the headers it was given: %v", tc.in)
			}
			got := tracing.Extract(out)
			if got.Parent.SpanID().String() != tc.wantParent || got.Parent.TraceID().String() != traceA {
				t.Errorf("Extract(Outgoing(%v)).Parent = %v, want span %s of trace %s", tc.in, got.Parent, tc.wantParent, traceA)
			}
			switch {
			case tc.wantLink == "" && got.Link.IsValid():
				t.Errorf("Extract(Outgoing(%v)).Link = %v, want none", tc.in, got.Link)
			case tc.wantLink != "" && got.Link.SpanID().String() != tc.wantLink:
				t.Errorf("Extract(Outgoing(%v)).Link = %v, want span %s", tc.in, got.Link, tc.wantLink)
			}
			if !tc.republish && out["tracestate"] != nil {
				t.Errorf("a new message kept the consumed one's tracestate %v", out["tracestate"])
			}
		})
	}
}

// The spans themselves: a delivery's span is under the creation context
// and links to the republish; a republish under a delivery links to the
// creation context; a new message's publish is the next creation context.
func TestSpansFollowTheHeaders(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := tracing.New(tp)
	if tracing.New(nil) != nil {
		t.Fatal("tracing.New(nil) is not nil: tracing must be off without a provider")
	}
	headers := map[string]any{"traceparent": "00-" + traceA + "-" + creation + "-01", "x-acemq-trace-link": "00-" + traceA + "-" + retry + "-01"}
	ctx, process := tr.Process(context.Background(), tracing.Delivery{Queue: "shop.b", Exchange: "", RoutingKey: "shop.b", MessageID: "m-1", Headers: headers})
	retried, republish := tr.Publish(ctx, tracing.Publishing{RoutingKey: "shop.b.retry.2s", MessageID: "m-1", Headers: headers, Republish: true})
	output, publish := tr.Publish(ctx, tracing.Publishing{Exchange: "shop", RoutingKey: "c", MessageID: "m-2", Headers: headers})
	tracing.End(republish, nil, "")
	tracing.End(publish, nil, "")
	process.End()

	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans ended, want 3", len(spans))
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = s
	}
	p := byName["process shop.b"]
	if p == nil || p.Parent().SpanID().String() != creation || p.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("process span %v: want a consumer span under the creation context %s", p, creation)
	}
	if l := p.Links(); len(l) != 1 || l[0].SpanContext.SpanID().String() != retry {
		t.Errorf("process span links %v, want the retry's publish %s", l, retry)
	}
	r := byName["publish shop.b.retry.2s"]
	if r == nil || r.Parent().SpanID() != p.SpanContext().SpanID() || r.SpanKind() != trace.SpanKindProducer {
		t.Fatalf("retry publish span %v: want a producer span under the delivery's", r)
	}
	if l := r.Links(); len(l) != 1 || l[0].SpanContext.SpanID().String() != creation {
		t.Errorf("retry publish links %v, want the creation context %s", l, creation)
	}
	if got := tracing.Extract(retried); got.Parent.SpanID().String() != creation || got.Link.SpanID() != r.SpanContext().SpanID() {
		t.Errorf("retried message's context = %+v, want parent %s and link %s", got, creation, r.SpanContext().SpanID())
	}
	o := byName["publish shop"]
	if got := tracing.Extract(output); o == nil || got.Parent.SpanID() != o.SpanContext().SpanID() || got.Link.IsValid() {
		t.Errorf("new message's context = %+v, want the publish span %v as parent and no link", got, o)
	}
	for _, s := range spans {
		if s.SpanContext().TraceID().String() != traceA {
			t.Errorf("span %q has trace %s, want %s", s.Name(), s.SpanContext().TraceID(), traceA)
		}
	}
}

// Tracing is off unless the environment asks for it.
func TestConfigured(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set: off", nil, false},
		{"an OTLP endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"a traces endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"the exporter named: on", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"exporter none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false},
		{"the SDK disabled wins", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tracing.Configured(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Errorf("Configured(%v) = %v, want %v", tc.env, got, tc.want)
			}
		})
	}
}

// An exporter acemq-flow does not ship is refused, naming the variable.
func TestFromEnvRefusesOtherExporters(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	tp, err := tracing.FromEnv(t.Context(), "")
	if err == nil || tp != nil {
		t.Fatalf("FromEnv with OTEL_TRACES_EXPORTER=zipkin = %v, %v; want an error", tp, err)
	}
	if want := "OTEL_TRACES_EXPORTER=zipkin"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %q", err, want)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if tp, err := tracing.FromEnv(t.Context(), ""); tp != nil || err != nil {
		t.Errorf("FromEnv with OTEL_TRACES_EXPORTER=none = %v, %v; want nil, nil", tp, err)
	}
}

// The relay's publish of an outbox record: the row's context becomes the
// message's creation context (unless its headers carry one of their own,
// which wins, or it is not a traceparent), and the publish links to it,
// the root of a trace of its own rather than its child.
func TestRelayedPublishLinksToTheRowsContext(t *testing.T) {
	row := "00-" + traceA + "-" + creation + "-01"
	own := "00-" + traceA + "-" + step + "-01"
	h := map[string]any{"x-acemq-attempt": int64(1)}
	got := tracing.WithCreation(h, row)
	if got["traceparent"] != row || len(h) != 1 {
		t.Errorf("WithCreation(%v, row) = %v (headers now %v), want the row's traceparent in a copy", h, got, h)
	}
	if got := tracing.WithCreation(map[string]any{"traceparent": own}, row); got["traceparent"] != own {
		t.Errorf("WithCreation over a traceparent of the headers' own = %v, want it kept", got)
	}
	if got := tracing.WithCreation(h, "not-a-traceparent"); got["traceparent"] != nil {
		t.Errorf("WithCreation with an invalid column = %v, want nothing set", got)
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	out, span := tracing.New(tp).Publish(context.Background(), tracing.Publishing{Exchange: "shop", RoutingKey: "a", MessageID: "w-1",
		Headers: tracing.WithCreation(h, row), Relayed: true})
	span.End()
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	s := spans[0]
	if s.Parent().IsValid() || s.SpanContext().TraceID().String() == traceA {
		t.Errorf("relayed publish has parent %v in trace %s, want the root of a trace of its own", s.Parent(), s.SpanContext().TraceID())
	}
	if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID().String() != creation {
		t.Errorf("relayed publish links %v, want the row's context %s", l, creation)
	}
	in := tracing.Extract(out)
	if in.Parent.SpanID().String() != creation || in.Link.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("relayed message's context = %+v, want parent %s (the writer's) and link %s (the relay's publish)", in, creation, s.SpanContext().SpanID())
	}
}
