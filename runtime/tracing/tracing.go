// Package tracing makes the runtime's OpenTelemetry spans, named and
// attributed by the messaging conventions for RabbitMQ: a producer span
// per publish ("publish <exchange>"), a consumer span per delivery
// processed ("process <queue>"), a client span per plugin call, and the W3C
// trace context carried in AMQP headers from hop to hop (carrier.go says
// which header holds what, and when a span is a child and when a link).
//
// A nil *Tracer is tracing off: callers check for nil before calling, so
// that an untraced runtime pays one comparison per message and nothing
// else. FromEnv builds the provider the standard OTEL_* variables
// configure. The package imports nothing of acemq-flow: the engine, the
// relay, the scheduler and the operator tools share it.
package tracing

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// Our own attributes, beside the conventions'.
const (
	AttrFlow         = attribute.Key("acemq.flow")
	AttrPipeline     = attribute.Key("acemq.pipeline")
	AttrStep         = attribute.Key("acemq.step")
	AttrStop         = attribute.Key("acemq.stop")
	AttrConsumer     = attribute.Key("acemq.consumer")
	AttrSaga         = attribute.Key("acemq.saga")
	AttrSagaInstance = attribute.Key("acemq.saga.instance")
	AttrAttempt      = attribute.Key("acemq.attempt")
	AttrOutcome      = attribute.Key("acemq.outcome")
	AttrPlugin       = attribute.Key("acemq.plugin")
	AttrHandler      = attribute.Key("acemq.handler")
	AttrOutboxID     = attribute.Key("acemq.outbox.id")
	AttrSchedule     = attribute.Key("acemq.schedule")
	AttrScheduleTick = attribute.Key("acemq.schedule.tick")
)

// Scope is the instrumentation scope of the runtime's spans.
const Scope = "github.com/acemq/acemq-flow"

// Tracer makes the runtime's spans with one trace.Tracer. It is safe for
// concurrent use.
type Tracer struct {
	t trace.Tracer
}

// New returns a Tracer on tp, or nil (tracing off) when tp is nil.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{t: tp.Tracer(Scope)}
}

// Delivery is what the span of a delivery processed says about it.
type Delivery struct {
	Queue, Exchange, RoutingKey string
	MessageID, CorrelationID    string
	DeliveryTag                 uint64
	BodySize                    int
	Headers                     map[string]any
}

// Process starts the consumer span of delivery d (kind CONSUMER, operation
// process): a child of the message's creation context, linked to the span
// that last republished it (Extract), with attrs besides the conventions'.
// The caller ends it.
func (t *Tracer) Process(ctx context.Context, d Delivery, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	in := Extract(d.Headers)
	if in.Parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, in.Parent)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if in.Link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: in.Link}))
	}
	base := []attribute.KeyValue{
		semconv.MessagingSystemRabbitMQ,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(d.Exchange),
		semconv.MessagingConsumerGroupName(d.Queue),
		semconv.MessagingMessageBodySize(d.BodySize),
	}
	if d.DeliveryTag != 0 {
		base = append(base, semconv.MessagingRabbitMQMessageDeliveryTag(int(d.DeliveryTag)))
	}
	if d.RoutingKey != "" {
		base = append(base, semconv.MessagingRabbitMQDestinationRoutingKey(d.RoutingKey))
	}
	if d.MessageID != "" {
		base = append(base, semconv.MessagingMessageID(d.MessageID))
	}
	if d.CorrelationID != "" {
		base = append(base, semconv.MessagingMessageConversationID(d.CorrelationID))
	}
	opts = append(opts, trace.WithAttributes(append(base, attrs...)...))
	return t.t.Start(ctx, "process "+d.Queue, opts...)
}

// Publishing is what the span of a publish says about it.
type Publishing struct {
	Exchange, RoutingKey     string
	MessageID, CorrelationID string
	BodySize                 int
	Headers                  map[string]any
	// Republish is true for a message published again as it is (a retry,
	// a dead-letter, the delay ladder's delivery, a replay), false for a
	// new one (a step's output, a reply, a first send).
	Republish bool
	// Relayed is true for a message published out of a batch an
	// intermediary claimed (the outbox relay's), and implies Republish:
	// the batch is not the message's cause, so the span is not a child of
	// the message's creation context but links to it (the messaging
	// conventions' link across a batch), and the message keeps that
	// context, so that its consumers stay in the writer's trace.
	Relayed bool
}

// Publish starts the producer span of publishing p (kind PRODUCER,
// operation send, named "publish <exchange>", or "publish <queue>" through
// the default exchange), a child of ctx's span, and returns p's headers
// with the trace context set (Outgoing; a copy). A span that is the root of
// its trace is started from a republished message's creation context, so
// that it stays in the message's trace; a republish links to that context.
// A relayed publish (Relayed) links to it and is never its child. The
// caller ends the span with End once the broker confirmed or refused the
// publish.
func (t *Tracer) Publish(ctx context.Context, p Publishing, attrs ...attribute.KeyValue) (map[string]any, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
	if p.Relayed {
		p.Republish = true
	}
	if p.Republish {
		in := Extract(p.Headers)
		switch {
		case p.Relayed:
			for _, l := range []trace.SpanContext{in.Parent, in.Link} {
				if l.IsValid() {
					opts = append(opts, trace.WithLinks(trace.Link{SpanContext: l}))
				}
			}
		case !trace.SpanContextFromContext(ctx).IsValid() && in.Parent.IsValid():
			ctx = trace.ContextWithRemoteSpanContext(ctx, in.Parent)
			if in.Link.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: in.Link}))
			}
		case in.Parent.IsValid():
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: in.Parent}))
		}
	}
	base := []attribute.KeyValue{
		semconv.MessagingSystemRabbitMQ,
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("publish"),
		semconv.MessagingDestinationName(p.Exchange),
		semconv.MessagingMessageBodySize(p.BodySize),
	}
	if p.RoutingKey != "" {
		base = append(base, semconv.MessagingRabbitMQDestinationRoutingKey(p.RoutingKey))
	}
	if p.MessageID != "" {
		base = append(base, semconv.MessagingMessageID(p.MessageID))
	}
	if p.CorrelationID != "" {
		base = append(base, semconv.MessagingMessageConversationID(p.CorrelationID))
	}
	dest := p.Exchange
	if dest == "" {
		dest = p.RoutingKey
		if strings.HasPrefix(dest, "amq.") {
			// A reply queue (direct reply-to, a server-named queue): one
			// name per requester, not a span name.
			dest = "(temporary)"
			base = append(base, attribute.Bool("messaging.destination.temporary", true))
		}
	}
	opts = append(opts, trace.WithAttributes(append(base, attrs...)...))
	_, span := t.t.Start(ctx, "publish "+dest, opts...)
	return Outgoing(p.Headers, span.SpanContext(), p.Republish), span
}

// Call starts the client span of a call to handler of plugin (named "call
// <plugin>.<handler>"), a child of ctx's span, and returns ctx with it;
// the plugin host sends that context with the call (plugins/host). The
// caller ends the span with End.
func (t *Tracer) Call(ctx context.Context, plugin, handler string) (context.Context, trace.Span) {
	return t.t.Start(ctx, "call "+plugin+"."+handler, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.RPCSystemGRPC, semconv.RPCService("acemq.plugin.v1.Plugin"), semconv.RPCMethod("Calls"),
			AttrPlugin.String(plugin), AttrHandler.String(handler)))
}

// Start starts a span of kind with attrs, a child of ctx's span, for what
// is neither a publish, a delivery nor a plugin call (a schedule's tick);
// links are added when valid.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, links []trace.SpanContext, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(attrs...)}
	for _, l := range links {
		if l.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: l}))
		}
	}
	return t.t.Start(ctx, name, opts...)
}

// End ends span, its status an error describing err when err is not nil,
// error.type then the kind of err: kind when given, else "error" (a
// context's end: "canceled" or "deadline_exceeded").
func End(span trace.Span, err error, kind string) {
	if err != nil {
		Fail(span, err.Error(), errorKind(err, kind))
	}
	span.End()
}

// Fail sets span's status to an error with description, error.type kind.
func Fail(span trace.Span, description, kind string) {
	span.SetStatus(codes.Error, description)
	span.SetAttributes(semconv.ErrorTypeKey.String(kind))
}

func errorKind(err error, kind string) string {
	switch {
	case kind != "":
		return kind
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	return "error"
}
