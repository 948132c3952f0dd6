package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) names none.
const DefaultServiceName = "acemq-flow"

// Configured reports whether the environment asks for traces: tracing is
// off unless OTEL_TRACES_EXPORTER names an exporter other than none, or an
// OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with OTEL_TRACES_EXPORTER unset, and
// OTEL_SDK_DISABLED is not true. Off by default, unlike the SDKs' own
// default of otlp, so that a runtime started without any of these sends
// nothing anywhere and pays nothing.
func Configured(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	case "none":
		return false
	default:
		return true
	}
}

// FromEnv returns the tracer provider the OTEL_* environment configures
// (Configured), or nil when it configures none. The exporter is OTLP, over
// the protocol OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL names (http/protobuf by default, or grpc),
// to the OTEL_EXPORTER_OTLP_* endpoint, headers, timeout and TLS settings
// (read by the exporter); the sampler is OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (parentbased_always_on by default), batching
// OTEL_BSP_*, and the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, service.name defaulting to acemq-flow and
// service.version to version when not empty. Nothing connects yet.
//
// The caller owns the provider: Shutdown flushes the spans still batched
// and stops it; call it once the runtime has drained.
func FromEnv(ctx context.Context, version string) (*sdktrace.TracerProvider, error) {
	if !Configured(os.Getenv) {
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	for _, name := range strings.Split(os.Getenv("OTEL_TRACES_EXPORTER"), ",") {
		switch name = strings.TrimSpace(name); name {
		case "", "otlp":
			if exp != nil {
				continue
			}
			var err error
			if exp, err = otlpExporter(ctx); err != nil {
				return nil, err
			}
		case "none":
		default:
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: acemq-flow exports traces only over OTLP; set it to otlp (or none, or leave it unset with an OTEL_EXPORTER_OTLP_ENDPOINT)", name)
		}
	}
	if exp == nil {
		return nil, nil
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", DefaultServiceName)}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	// Later detectors win: the environment overrides the defaults.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: the resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

func otlpExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	protocol := strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if protocol == "" {
		protocol = strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: acemq-flow exports traces over http/protobuf or grpc; set one of them", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter (%s): %w", protocol, err)
	}
	return exp, nil
}
