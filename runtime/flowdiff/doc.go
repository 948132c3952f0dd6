// Package flowdiff is the change check of FLOW-FORMAT §7: it compares two
// sets of loaded flows, the deployed (old) and the proposed (new), each
// with its compiled plan, and names every change with whether it breaks
// what is deployed or in flight, where it is written, what happens to the
// messages in flight, and how to deploy it safely.
//
// It works from the plans, so every queue, rung and exchange is named
// exactly as it reaches the broker, and from the spec for positions and
// payload types. It does no I/O of its own: $ref'd schema files are read
// through Side.ReadFile, and queue depths (acemq-flow diff --amqp) through
// the function Settle is given. It imports spec, runtime/plan and the
// schema registry's compatibility rules (stores/schemacompat), never the
// broker.
//
// Use:
//  1. Compare(old, new, opts) returns the changes, sorted by position.
//  2. Settle(changes, depth) marks the breaking changes whose queues are
//     all empty on the broker: nothing is in flight to break.
//  3. Change.Severity says how to report each one.
package flowdiff
