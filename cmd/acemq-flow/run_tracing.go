package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/runtime/tracing"
)

// tracingFlushTimeout bounds how long `run` waits, once drained, for the
// spans still batched to reach the collector.
const tracingFlushTimeout = 5 * time.Second

// startTracing builds the tracer provider the OTEL_* environment
// configures (tracing.FromEnv) and returns it with the function that
// flushes and stops it, to call once the runtime has drained; a nil
// provider (tracing off) and a stop that does nothing when the environment
// configures none.
func startTracing(ctx context.Context, log *slog.Logger) (trace.TracerProvider, func(), error) {
	bi, _ := debug.ReadBuildInfo()
	tp, err := tracing.FromEnv(ctx, readVersion(bi).Version)
	if err != nil || tp == nil {
		return nil, func() {}, err
	}
	log.Info("tracing on: spans are exported over OTLP as the OTEL_* environment says")
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("spans not all exported at shutdown; check OTEL_EXPORTER_OTLP_ENDPOINT", "error", err)
		}
	}, nil
}
