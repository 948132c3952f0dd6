// Package runtime runs flows on RabbitMQ.
//
// It turns loaded flows into a Plan (Compile: pure, no I/O), then runs the
// plan (New, then Run): it connects, declares the topology, starts the
// plugins and one consumer group per step and consumer, moves each message
// through the steps, and drains on shutdown. What happens to one delivery is
// decided by pure functions (Precheck, Decide, InProgress) of the plan
// entry, the envelope and the handler's outcome; the consumer groups carry
// the decisions out (publish with confirms, then acknowledge). The AMQP
// layer is package runtime/broker.
//
// The wire names and headers of FLOW-FORMAT.md §2 come from one function or
// constant each (names.go). Carried routing slips are Itinerary values,
// read and written field for field as other languages write them.
//
// Entry points, in the order a caller uses them:
//
//  1. Compile(flows) → *Plan, or spec.Diagnostics when derived wire names
//     collide. Plan.WriteText and Plan.WriteJSON render it.
//  2. New(plan, Options) checks what this runtime can run and allocates.
//     Options.Handlers registers in-process Go handlers next to plugins;
//     Options.Store is the idempotency store for idempotent consumers.
//  3. Run(ctx) blocks until ctx is done and every consumer has drained.
//     While it runs, the registry (Consumers, Start, Stop, Scale, Prefetch,
//     Pause, Resume) steers the consumer groups, and the admin listener
//     serves it with /healthz, /readyz and /metrics.
//
// Around the runtime: FirstMessage and Send start a run (`acemq-flow send`),
// Replay and Inspect work on dead-letter queues, and the outbox relay
// publishes what services wrote to their outbox.
package runtime
