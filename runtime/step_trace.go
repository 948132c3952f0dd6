package runtime

import (
	"context"
	"errors"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/tracing"
)

// Tracing (Options.Tracing; runtime/tracing): the step's outermost wrapper
// starts a consumer span per delivery, "process <queue>", a child of the
// message's creation context and linked to the span that last republished
// it, and ends it with the decision's outcome; every publish the decision
// makes is a producer span under it (tracedPublisher), and a plugin call a
// client span whose context the plugin receives (traceCall). With tracing
// off none of this is installed: newGroup checks once.

// traceStep is the tracing wrapper; next unchanged when tracing is off.
func (g *group) traceStep(next stepFunc) stepFunc {
	t := g.r.tracer
	if t == nil {
		return next
	}
	base := consumerAttributes(g.c)
	return func(ctx context.Context, d *delivery) decide.Decision {
		in := d.in
		attrs := append(base[:len(base):len(base)], tracing.AttrAttempt.Int(in.Env.Attempt))
		if in.Env.Slip != nil {
			if stop, ok := in.Env.Slip.Current(); ok && stop.Name != "" {
				attrs = append(attrs, tracing.AttrStop.String(stop.Name))
			}
		}
		if g.c.Saga != "" {
			// The instance's id: the first message's id starts it.
			if id, _ := decide.SagaInstanceID(in); id != "" {
				attrs = append(attrs, tracing.AttrSagaInstance.String(id))
			}
		}
		ctx, span := t.Process(ctx, tracing.Delivery{Queue: g.c.Queue, Exchange: in.Props.Exchange, RoutingKey: in.Props.RoutingKey,
			MessageID: in.Env.MessageID, CorrelationID: in.Env.CorrelationID, BodySize: len(in.Body), Headers: in.Env.Headers}, attrs...)
		d.span = span
		dec := next(ctx, d)
		span.SetAttributes(tracing.AttrOutcome.String(dec.Outcome))
		switch dec.Outcome {
		case decide.OutcomeRetried, decide.OutcomeDeadLettered:
			tracing.Fail(span, dec.Reason, dec.Outcome)
		}
		span.End()
		return dec
	}
}

// consumerAttributes are the attributes of every span of c's deliveries.
func consumerAttributes(c *plan.Consumer) []attribute.KeyValue {
	attrs := []attribute.KeyValue{tracing.AttrFlow.String(c.Flow), tracing.AttrConsumer.String(c.ID)}
	if c.Pipeline != "" {
		attrs = append(attrs, tracing.AttrPipeline.String(c.Pipeline))
	}
	if c.Step != "" {
		attrs = append(attrs, tracing.AttrStep.String(c.Step))
	}
	if c.Saga != "" {
		attrs = append(attrs, tracing.AttrSaga.String(c.Saga))
	}
	return attrs
}

// inboundKey is the context key of the message id of the delivery whose
// decision is being published: a publish with the same id republishes
// that message (a retry, a dead-letter, an in-progress delivery), any other
// is a new message.
type inboundKey struct{}

// tracedContext is ctx carrying the delivery's span and message id, for
// the publishes of its decision; ctx itself when the delivery has no span.
func tracedContext(ctx context.Context, d *delivery) context.Context {
	if d.span == nil {
		return ctx
	}
	return context.WithValue(trace.ContextWithSpan(ctx, d.span), inboundKey{}, d.in.Env.MessageID)
}

// tracedPublisher publishes through next, each publish a producer span
// (tracing.Tracer.Publish) ended when the broker confirmed or refused it.
type tracedPublisher struct {
	next publisher
	t    *tracing.Tracer
}

func (p tracedPublisher) PublishFunc(ctx context.Context, msg broker.Message, done func(error)) error {
	id, ok := ctx.Value(inboundKey{}).(string)
	h, span := p.t.Publish(ctx, tracing.Publishing{Exchange: msg.Exchange, RoutingKey: msg.RoutingKey, MessageID: msg.MessageId,
		CorrelationID: msg.CorrelationId, BodySize: len(msg.Body), Headers: msg.Headers, Republish: ok && id == msg.MessageId})
	msg.Headers = amqp.Table(h)
	err := p.next.PublishFunc(ctx, msg, func(err error) {
		tracing.End(span, err, publishErrorKind(err))
		done(err)
	})
	if err != nil {
		// done is not called when the publish is refused at once.
		tracing.End(span, err, publishErrorKind(err))
	}
	return err
}

// publishErrorKind is error.type of a publish's span.
func publishErrorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, broker.ErrUnroutable):
		return "unroutable"
	case errors.Is(err, broker.ErrNacked):
		return "nacked"
	case errors.Is(err, broker.ErrInvalidMessage):
		return "invalid_message"
	case errors.Is(err, broker.ErrIndeterminate):
		return "indeterminate"
	}
	return ""
}

// tracePublish starts the producer span of publishing m outside a
// delivery (PublishAt), and sets m's trace context; nil when tracing is
// off. m's headers are replaced, not changed.
func (r *Runtime) tracePublish(ctx context.Context, m *decide.Message) trace.Span {
	if r.tracer == nil {
		return nil
	}
	h, span := r.tracer.Publish(ctx, tracing.Publishing{Exchange: m.Exchange, RoutingKey: m.RoutingKey, MessageID: m.MessageID,
		CorrelationID: m.CorrelationID, BodySize: len(m.Body), Headers: m.Headers})
	m.Headers = decide.Table(h)
	return span
}

// traceCall makes each call of a plugin's handler a client span, "call
// <plugin>.<handler>", under the delivery's; the plugin host sends its
// context with the call, so that the plugin's own spans join the trace.
// call unchanged when tracing is off or the handler runs in process.
func (g *group) traceCall(call func(ctx context.Context, req Request) (decide.Result, error)) func(ctx context.Context, req Request) (decide.Result, error) {
	t := g.r.tracer
	if _, inProcess := g.r.opts.Handlers[g.c.Handler]; t == nil || inProcess || g.c.Handler == "" {
		return call
	}
	plugin, handler, _ := strings.Cut(g.c.Handler, ".")
	return func(ctx context.Context, req Request) (decide.Result, error) {
		ctx, span := t.Call(ctx, plugin, handler)
		res, err := call(ctx, req)
		kind := ""
		if errors.Is(err, decide.ErrFatal) {
			kind = "fatal"
		} else if err != nil {
			kind = "retryable"
		}
		tracing.End(span, err, kind)
		return res, err
	}
}
