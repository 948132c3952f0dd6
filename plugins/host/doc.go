// Package host runs acemq-flow plugins: the processes that serve a flow's
// step handlers over hashicorp/go-plugin (gRPC, automatic mutual TLS).
//
// The runtime uses it in this order:
//
//  1. Start(ctx, Config) checks the executable's sha256 when one is given,
//     starts the process (in its own process group, with a parent-death
//     signal on Linux), completes the handshake within StartTimeout, checks
//     health, describes the handlers and opens the call stream.
//  2. Handlers (or Describe) lists what the plugin serves, for checking
//     the flows that name it.
//  3. Call, from any number of goroutines, runs one handler on one message.
//     All calls to one plugin share one bidirectional stream, batched in
//     both directions, with many in flight: on Unix, a socket pair private
//     to the two processes when the plugin serves it (plugins built with
//     the SDK do), else gRPC's Calls stream. A crashed plugin is restarted
//     with backoff; calls in flight fail as retryable, later calls wait for
//     the restart within their timeout.
//  4. Close kills the process (and anything it started) and waits for it.
//
// Errors are decided on types: IsFatal(err) is true only for a failure the
// plugin marked fatal (*CallError with Fatal); crashes, timeouts and a
// plugin that is not running are retryable. A checksum mismatch is a
// *ChecksumError.
//
// The package imports plugins/proto and nothing else of acemq-flow.
package host
