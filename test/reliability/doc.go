// Package reliability is acemq-flow's proof under faults: the scenarios of
// research/reliability.md §7.3 as tests (build tag chaos, TestChaosS<N>),
// each run against the real broker and database with the recorder plugin,
// judged by the harness's checker and printed as one row of a table at the
// end. `make chaos-short` runs the ★ subset with -short; `make chaos` all.
package reliability
