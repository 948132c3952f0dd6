package tracing

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Headers of a message's trace context (W3C Trace Context; its AMQP
// binding puts them in the application headers, as here).
const (
	// HeaderTraceParent is the message's creation context: the span that
	// published it as a new message. A retry, the delay ladder, a replay
	// and a dead-letter republish the same message and leave it as it is
	// (the messaging conventions: intermediaries do not change the
	// creation context), so every delivery of one message is a child of
	// the span that created it.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	// HeaderTraceLink is, in traceparent's format, the span that last
	// republished the message (a retry rung, the delay ladder's `.due`
	// consumer, a replay, a dead-letter): the next delivery's span links
	// to it rather than making it its parent.
	HeaderTraceLink = "x-acemq-trace-link"
)

// Carrier is an AMQP headers table (amqp.Table and decide.Table convert to
// it) read and written as a propagation.TextMapCarrier: a header's value
// is read when it is a string or bytes, and written as a string.
type Carrier map[string]any

// Get returns the header key as text, or "".
func (c Carrier) Get(key string) string {
	switch v := c[key].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// Set sets the header key to value.
func (c Carrier) Set(key, value string) { c[key] = value }

// Keys lists the headers.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

var w3c = propagation.TraceContext{}

// Incoming is how the span of a delivery relates to the spans before it,
// as its headers say. Parent is the message's creation context
// (traceparent): a delivery's span is its child, so that a 1:1 hop is
// parent and child and every delivery of the message stays in its trace.
// Link is the span that last republished it (x-acemq-trace-link), when the
// message crossed a retry rung, a delay, a replay or a dead-letter queue on
// its way here: the delivery's span links to it, not under it (the
// messaging conventions' link for a hop that is not 1:1). Either may be
// invalid: a message from a client that does not trace has neither.
type Incoming struct {
	Parent trace.SpanContext
	Link   trace.SpanContext
}

// Extract reads a delivery's trace context from its headers h.
func Extract(h map[string]any) Incoming {
	var in Incoming
	if len(h) == 0 {
		return in
	}
	c := Carrier(h)
	if c.Get(HeaderTraceParent) != "" {
		in.Parent = trace.SpanContextFromContext(w3c.Extract(context.Background(), c))
	}
	if v := c.Get(HeaderTraceLink); v != "" {
		in.Link = parseTraceParent(v)
		if in.Link.Equal(in.Parent) {
			in.Link = trace.SpanContext{}
		}
	}
	return in
}

// parseTraceParent reads a traceparent value, or returns an invalid
// context.
func parseTraceParent(v string) trace.SpanContext {
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.MapCarrier{HeaderTraceParent: v}))
}

// formatTraceParent is sc in traceparent's format.
func formatTraceParent(sc trace.SpanContext) string {
	m := propagation.MapCarrier{}
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), m)
	return m[HeaderTraceParent]
}

// Outgoing returns headers h (a copy: h itself is not changed) for a
// publish whose span is sc. A new message (republish false) gets sc as its
// creation context, and no link. A message republished as it is (a retry,
// a dead-letter, the delay ladder's delivery, a replay) keeps its creation
// context, or gets sc as one when it had none, and gets sc as its link.
func Outgoing(h map[string]any, sc trace.SpanContext, republish bool) map[string]any {
	out := make(map[string]any, len(h)+3)
	maps.Copy(out, h)
	if !sc.IsValid() {
		return out
	}
	c := Carrier(out)
	if !republish {
		delete(out, HeaderTraceLink)
		delete(out, HeaderTraceState)
		w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
		return out
	}
	if !Extract(out).Parent.IsValid() {
		delete(out, HeaderTraceState)
		w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	}
	out[HeaderTraceLink] = formatTraceParent(sc)
	return out
}

// WithCreation returns headers h with traceparent as their creation
// context when h carry none and traceparent is valid (the writer's context
// an outbox record keeps in its column); h itself otherwise. h is not
// changed: a copy is returned when one is set.
func WithCreation(h map[string]any, traceparent string) map[string]any {
	if traceparent == "" || Carrier(h).Get(HeaderTraceParent) != "" || !parseTraceParent(traceparent).IsValid() {
		return h
	}
	out := make(map[string]any, len(h)+1)
	maps.Copy(out, h)
	out[HeaderTraceParent] = traceparent
	delete(out, HeaderTraceState)
	return out
}

// TraceParent returns the span context of ctx in traceparent's format, or
// "" when ctx has none.
func TraceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return formatTraceParent(sc)
}
