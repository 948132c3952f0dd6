// Command tracekit is the plugin of the tracing test: its handlers start a
// span of their own from the call's context, exported over OTLP/HTTP to
// the endpoint the environment names (as the runtime's), so that the test
// sees whether the plugin's spans join the message's trace.
//
//   - echo returns its input;
//   - flaky fails retryably until the attempt number exceeds the payload's
//     fail_attempts, then echoes.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/plugins/sdk"
)

var tracer trace.Tracer

func main() {
	exp, err := otlptracehttp.New(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracekit: the OTLP exporter:", err)
		os.Exit(1)
	}
	// Each span is exported as it ends: the runtime stops this process
	// without a word, and a batch would die with it.
	tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("tracekit")
	sdk.Serve(map[string]sdk.Handler{
		"echo":  {Func: echo},
		"flaky": {Func: flaky},
	})
}

func echo(ctx context.Context, req *sdk.Request) (*sdk.Result, error) {
	_, span := tracer.Start(ctx, "tracekit echo", trace.WithAttributes(attribute.Int("attempt", req.Envelope.Attempt)))
	defer span.End()
	return &sdk.Result{Payload: req.Payload}, nil
}

func flaky(ctx context.Context, req *sdk.Request) (*sdk.Result, error) {
	_, span := tracer.Start(ctx, "tracekit flaky", trace.WithAttributes(attribute.Int("attempt", req.Envelope.Attempt)))
	defer span.End()
	var in struct {
		FailAttempts int `json:"fail_attempts"`
	}
	if err := json.Unmarshal(req.Payload, &in); err != nil {
		return nil, sdk.Fatal(fmt.Errorf("tracekit: flaky wants {\"fail_attempts\": N}: %w", err))
	}
	if req.Envelope.Attempt <= in.FailAttempts {
		span.SetStatus(codes.Error, "failing on purpose")
		return nil, fmt.Errorf("tracekit: flaky fails attempt %d of the first %d", req.Envelope.Attempt, in.FailAttempts)
	}
	return &sdk.Result{Payload: req.Payload}, nil
}
