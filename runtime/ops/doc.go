// Package ops holds the operator tools that work on the broker directly:
// Send starts a run and waits for its reply (`acemq-flow send`), Inspect
// shows a queue's first messages and puts them back, and Replay moves dead
// letters back to the queue they failed on.
package ops
