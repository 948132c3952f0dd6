package host

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceContext is the W3C trace context of ctx's span (traceparent, and
// tracestate when set), sent with a call as HandleRequest.trace_context so
// that the plugin's spans join the caller's trace; nil when ctx carries no
// span, as when the runtime does not trace.
func traceContext(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	m := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, m)
	return m
}
