package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// Request is one call of a handler: one message.
type Request struct {
	// Handler is the name the host called, without the plugin prefix.
	Handler string
	// Compensate is true when the call is a saga step's compensation: the
	// saga is undoing a step that completed. Payload is then the saga's
	// input, as for every step, and StepOutput what that step's handler
	// returned.
	Compensate bool
	// Envelope describes the message beside its payload.
	Envelope Envelope
	// Payload is the message body as received, JSON for typed flows. The
	// handler owns it and may keep it.
	Payload []byte
	// StepOutput is, for a compensation, the payload the compensated step
	// returned, as the saga recorded it (nil when it returned nothing); nil
	// for every other call. The handler owns it. TypedCompensation decodes
	// it.
	StepOutput []byte
}

// Envelope is what the runtime knows about a message beside its payload
// (FLOW-FORMAT.md §2).
type Envelope struct {
	MessageID     string
	Type          string
	CorrelationID string
	CausationID   string
	// Origin is the flow or service that first published the message.
	Origin string
	// Attempt is 1 on first delivery and grows by one with each trip through
	// the retry ladder.
	Attempt int
	// FirstSeen is when the message was first published (zero if unknown).
	FirstSeen time.Time
	// Headers are the message's application headers, as text.
	Headers map[string]string
	// Queue is the queue the message was consumed from ("" when the host
	// did not say: a runtime older than this field).
	Queue string
	// ReceivedAt is when the runtime received the delivery, on its clock
	// (zero when the host did not say).
	ReceivedAt time.Time
}

// Result is what a handler returns when it produces an output. A nil
// *Result with a nil error means the handler returns nothing (see ErrStop).
type Result struct {
	// Payload is the body of the step's output message.
	Payload []byte
}

// HandlerFunc handles one message. It is called concurrently for many
// messages; ctx is cancelled at the call's timeout or when the host stops
// waiting. When the runtime traces, ctx carries the span context of its
// call (trace.SpanContextFromContext): spans a handler starts from ctx
// with an OpenTelemetry tracer are children of it, in the message's trace.
type HandlerFunc func(ctx context.Context, req *Request) (*Result, error)

// Handler is one handler a plugin serves: its function and the flow type
// names it expects and returns, which `acemq-flow validate --plugins` checks
// against the flow. An empty type name means any JSON value.
type Handler struct {
	Func       HandlerFunc
	InputType  string
	OutputType string
}

// WithTypes returns a copy of h that declares the given flow type names,
// for handlers whose Go types are not named like the flow's types.
func (h Handler) WithTypes(input, output string) Handler {
	h.InputType, h.OutputType = input, output
	return h
}

// None is the output type of a typed handler that returns nothing, for a
// step declared with `output: none`.
type None struct{}

// ErrStop, returned by a handler (or wrapped in its error), means the
// handler returns nothing: the run stops here, which the runtime counts as
// a decision, not a failure.
var ErrStop = errors.New("stop")

// Typed adapts a function on the author's own types to a Handler. The input
// is decoded from the JSON payload (a []byte or json.RawMessage input
// receives the payload as is); a payload that does not decode is a fatal
// failure, since retrying cannot change it. The output is encoded as JSON,
// or returned as is when Out is []byte or json.RawMessage; Out None means
// the handler returns nothing.
//
// The declared type names are the Go type names of In and Out when they
// are named types ("Order"), "none" for None, and empty (any JSON value)
// otherwise; WithTypes overrides them.
func Typed[In, Out any](fn func(ctx context.Context, env Envelope, in In) (Out, error)) Handler {
	inName, outName := typeName[In](), typeName[Out]()
	return Handler{
		InputType:  inName,
		OutputType: outName,
		Func: func(ctx context.Context, req *Request) (*Result, error) {
			var in In
			if err := decode(req.Payload, &in); err != nil {
				return nil, Fatal(fmt.Errorf("payload does not decode as %s: %w", describeType[In](), err))
			}
			out, err := fn(ctx, req.Envelope, in)
			if err != nil {
				return nil, err
			}
			if _, none := any(out).(None); none {
				return nil, nil
			}
			b, err := encode(out)
			if err != nil {
				return nil, Fatal(fmt.Errorf("output does not encode as JSON: %w", err))
			}
			return &Result{Payload: b}, nil
		},
	}
}

// TypedCompensation adapts a saga compensation on the author's own types
// to a Handler: in is decoded from the payload (the saga's input, as every
// step gets it) and step from Request.StepOutput, what the compensated step
// returned (left the zero value when it returned nothing). A compensation
// returns nothing; its output type is "none". A payload or step output
// that does not decode is a fatal failure, and a call that is not a
// compensation (Request.Compensate false) is refused as fatal: the handler
// is bound to a step rather than to its compensate.
func TypedCompensation[In, Step any](fn func(ctx context.Context, env Envelope, in In, step Step) error) Handler {
	return Handler{
		InputType:  typeName[In](),
		OutputType: "none",
		Func: func(ctx context.Context, req *Request) (*Result, error) {
			if !req.Compensate {
				return nil, Fatal(fmt.Errorf("handler %q is a compensation and was called as a step: bind it to a saga step's compensate", req.Handler))
			}
			var in In
			if err := decode(req.Payload, &in); err != nil {
				return nil, Fatal(fmt.Errorf("payload does not decode as %s: %w", describeType[In](), err))
			}
			var step Step
			if len(req.StepOutput) > 0 {
				if err := decode(req.StepOutput, &step); err != nil {
					return nil, Fatal(fmt.Errorf("the step's output does not decode as %s: %w", describeType[Step](), err))
				}
			}
			return nil, fn(ctx, req.Envelope, in, step)
		},
	}
}

func decode(payload []byte, v any) error {
	switch p := v.(type) {
	case *[]byte:
		*p = bytes.Clone(payload)
		return nil
	case *json.RawMessage:
		*p = bytes.Clone(payload)
		return nil
	}
	return json.Unmarshal(payload, v)
}

func encode(v any) ([]byte, error) {
	switch p := v.(type) {
	case []byte:
		return p, nil
	case json.RawMessage:
		return p, nil
	}
	return json.Marshal(v)
}

func typeName[T any]() string {
	t := reflect.TypeFor[T]()
	switch t {
	case reflect.TypeFor[None]():
		return "none"
	case reflect.TypeFor[json.RawMessage](), reflect.TypeFor[[]byte]():
		return ""
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() == "" {
		return "" // predeclared or unnamed: any JSON value of that shape
	}
	return t.Name()
}

func describeType[T any]() string {
	return reflect.TypeFor[T]().String()
}

// Fatal marks err as fatal: the runtime dead-letters the message at once
// instead of retrying it. Fatal(nil) is nil.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &kindError{err: err, fatal: true}
}

// Retryable marks err as retryable, which is also what an unmarked error
// is; use it to override a Fatal mark further down the chain.
// Retryable(nil) is nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &kindError{err: err, fatal: false}
}

// IsFatal reports whether the outermost Fatal or Retryable mark in err's
// chain is Fatal.
func IsFatal(err error) bool {
	var k *kindError
	return errors.As(err, &k) && k.fatal
}

type kindError struct {
	err   error
	fatal bool
}

func (e *kindError) Error() string { return e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }
