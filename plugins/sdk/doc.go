// Package sdk is what an acemq-flow plugin author imports to serve step
// handlers from a plugin binary.
//
// A plugin is a program whose main does nothing but call Serve with its
// handlers, keyed by the handler name a flow file uses after the plugin's
// name (handler "stock.reserve" is key "reserve" in plugin "stock"):
//
//	func main() {
//		sdk.Serve(map[string]sdk.Handler{
//			"reserve": sdk.Typed(reserve),
//			"release": {Func: release},
//		})
//	}
//
// Handlers are written one message at a time. Typed decodes the JSON payload
// into the author's input type and encodes the output; a Handler with a raw
// HandlerFunc sees the payload bytes. A handler decides the outcome of the
// step:
//
//   - return a value (or a *Result with a payload): the step's output;
//   - return ErrStop, or (nil, nil) from a HandlerFunc, or use None as the
//     output type: the handler returns nothing and the run stops here (a
//     decision, not a failure; after the last step it simply completes);
//   - return an error: a retryable failure, retried through the flow's retry
//     ladder; wrap it with Fatal to dead-letter the message at once.
//
// The Envelope gives the message id, correlation and causation ids, origin,
// first-seen time, headers and the attempt number (1 on first delivery).
//
// The host runs many calls of the same plugin process concurrently, so
// handlers must be safe for concurrent use. Each call's context is cancelled
// when the flow's per-call timeout passes or the host stops waiting. When
// the runtime traces (OpenTelemetry), the context also carries the span
// context of the runtime's call as a remote parent: a handler that starts
// spans from it with its own tracer provider joins the message's trace.
//
// The package imports nothing of the acemq-flow runtime, only the wire
// definitions in plugins/proto; go-plugin and gRPC never appear in a plugin
// author's code. Logger returns a *slog.Logger whose records show up in the
// runtime's log, tagged with the plugin's name.
package sdk
