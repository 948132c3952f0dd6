package runtime

import (
	"context"
	"reflect"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/tracing"
)

func ackStep(context.Context, *delivery) decide.Decision {
	return decide.Decision{Outcome: decide.OutcomeAcknowledged}
}

func ackCall(context.Context, Request) (decide.Result, error) { return decide.Result{}, nil }

// With tracing off, the tracing wrappers install nothing: the step and the
// plugin call are the very functions they wrap, and the context a
// decision is published in is the delivery's own. What is left per
// message is the nil check of tracedContext.
func TestTracingOffInstallsNothing(t *testing.T) {
	g := &group{r: &Runtime{}, c: &plan.Consumer{ID: "c", Handler: "p.h", Queue: "q"}}
	if got := g.traceStep(ackStep); reflect.ValueOf(got).Pointer() != reflect.ValueOf(stepFunc(ackStep)).Pointer() {
		t.Error("traceStep with tracing off wrapped the step")
	}
	if got := g.traceCall(ackCall); reflect.ValueOf(got).Pointer() != reflect.ValueOf(ackCall).Pointer() {
		t.Error("traceCall with tracing off wrapped the plugin call")
	}
	ctx := context.Background()
	if got := tracedContext(ctx, &delivery{}); got != ctx {
		t.Error("tracedContext with no span made a new context")
	}
	if span := g.r.tracePublish(ctx, &decide.Message{}); span != nil {
		t.Error("tracePublish with tracing off started a span")
	}

	// And on, they do wrap.
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	g.r.tracer = tracing.New(tp)
	if got := g.traceStep(ackStep); reflect.ValueOf(got).Pointer() == reflect.ValueOf(stepFunc(ackStep)).Pointer() {
		t.Error("traceStep with tracing on did not wrap the step")
	}
	d := &delivery{}
	g.traceStep(ackStep)(ctx, d)
	if d.span == nil || tracedContext(ctx, d) == ctx {
		t.Error("a traced delivery has no span to publish its decision under")
	}
}

// BenchmarkStepTracing is the tracing wrapper's cost per delivery: off (the
// step itself, what an untraced runtime runs), and on with a provider that
// samples every span and exports none. Compare the two as a ratio.
func BenchmarkStepTracing(b *testing.B) {
	in := decide.Inbound{Body: []byte(`{"n":1}`)}
	in.Env.MessageID = "m-1"
	in.Env.Headers = decide.Table{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	run := func(b *testing.B, r *Runtime) {
		g := &group{r: r, c: &plan.Consumer{ID: "c", Flow: "f", Pipeline: "p", Step: "s", Handler: "p.h", Queue: "p.s"}}
		step := g.traceStep(ackStep)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			d := &delivery{in: in}
			step(ctx, d)
			_ = tracedContext(ctx, d)
		}
	}
	b.Run("off", func(b *testing.B) { run(b, &Runtime{}) })
	b.Run("on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider()
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		run(b, &Runtime{tracer: tracing.New(tp)})
	})
}
