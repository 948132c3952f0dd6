// Package plan compiles loaded flows into a Plan: every exchange, queue
// (retry rungs, .dlq, .parked), binding and consumer the flows need, with
// the routes of pipelines and itineraries. Compile is pure: no I/O, no
// clock, no environment, and the same flows give byte-identical plans.
//
// The wire names and headers of FLOW-FORMAT.md §2 come from one function or
// constant each (names.go); nothing else assembles a queue, exchange or
// header name. WriteText, WriteJSON, Mermaid and DOT render a plan for
// `acemq-flow plan` and `acemq-flow graph`.
package plan
