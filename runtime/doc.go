// Package runtime is the engine: it runs a compiled plan on RabbitMQ.
//
// The packages around it, each with its own vocabulary:
//
//   - runtime/plan: Compile (flows → Plan: pure, no I/O), the wire names and
//     headers of FLOW-FORMAT.md §2 (names.go), the plan's text, JSON and
//     graph.
//   - runtime/decide: what happens to one delivery, as pure functions of the
//     plan entry, the envelope and the handler's outcome (Precheck, Decide,
//     InProgress), with its own message type; envelopes, routing slips and
//     the first message of a run, and what the wrappers around the call
//     decide (claims, sagas, delays, refused publishes, schedules' ticks).
//     It knows no broker, so the flow-test harness runs it as the engine
//     does. runtime/hostcall is the call into a plugin the two share.
//   - runtime/broker: supervised connections, confirmed publishing,
//     consumers, topology. runtime/wire maps its messages to decide's.
//   - runtime/relay (the outbox relay), runtime/admin (the admin API and its
//     client), runtime/ops (send, inspect, replay) sit beside the engine;
//     the engine imports none of them. runtime/scheduler holds the daemons
//     of time the engine starts and drains beside its consumer groups: the
//     delay ladder's `.due` consumer and the schedules' loop.
//
// Entry points of the engine, in the order a caller uses them:
//
//  1. New(plan, Options) checks what this runtime can run and allocates.
//     Options.Handlers registers in-process Go handlers next to plugins;
//     Options.Store is the idempotency store for idempotent consumers;
//     Options.Sagas the store of the sagas' instances, and Options.Schedules
//     that of the schedules' ticks.
//  2. Run(ctx) connects, declares the topology, starts the plugins and one
//     consumer group per step, consumer, saga step, compensation and saga
//     timeout, and blocks until ctx is done
//     and every consumer has drained. While it runs, the registry
//     (Consumers, Start, Stop, Scale, Prefetch, Pause, Resume) steers the
//     consumer groups; runtime/admin serves it over HTTP with Metrics.
//  3. PublishAt(ctx, msg, at) and PublishIn(ctx, msg, d), while Run runs,
//     deliver a message later through the delay ladder (FLOW-FORMAT §4):
//     it returns once the broker has it in the ladder. A runtime declares
//     the ladder and consumes its `.due` queue when a step has a `delay:`,
//     a saga a `timeout:`, or Options.Delays is set (`acemq-flow run` sets it, so that what any
//     client puts in the ladder is delivered).
//
// A consumer group carries each delivery through its step, a chain of
// small wrappers around the handler call (step.go; outermost, with
// Options.Tracing, the delivery's span, step_trace.go; then the claim check, which
// fetches a referenced body and stores a large result, the payload checks, the
// check that the exchanges a decision publishes to exist, the delay ladder
// for a step with a delay, the claim gate, the call, or for a saga's
// consumer the saga wrapper around it, step_saga.go), then carries the
// decision out: publish with confirms, then acknowledge.
package runtime
