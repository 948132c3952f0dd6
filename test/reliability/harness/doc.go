// Package harness is the reliability suite's toolkit (the Jepsen and
// MassTransit pattern of research/reliability.md §7.2): services of the
// test's own on the shared broker and database, the runtime as a child
// process, a generator that records what the broker accepted, a collector
// of the runs' replies, a drain, a ledger written by the recorder plugin, a
// checker that names what was lost or duplicated, leak snapshots of a
// process, and a TCP fault proxy.
//
// A scenario, in order:
//
//  1. Env(t) creates a vhost and a ledger schema; Ledger opens the ledger.
//  2. StartRuntime runs `acemq-flow run` on a flow that calls the recorder.
//  3. Collect consumes the replies; Generate publishes and records ok,
//     fail and info per message.
//  4. Faults are injected (kill, close connections, ...).
//  5. Drain waits until every ok run has replied and the work queues are
//     empty; DeadLetters reads .dlq and .parked.
//  6. Check computes the verdict; Record adds it to the printed table.
package harness
