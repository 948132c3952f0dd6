package host

import (
	"errors"
	"fmt"
)

// CallError is a failure the plugin reported for one call: its handler ran
// and returned an error. Fatal failures are dead-lettered at once; others go
// through the retry ladder.
type CallError struct {
	Plugin  string
	Handler string
	Fatal   bool
	Msg     string
}

// Error says which plugin and handler failed, how, and the plugin's message.
func (e *CallError) Error() string {
	kind := "retryable"
	if e.Fatal {
		kind = "fatal"
	}
	return fmt.Sprintf("plugin %q handler %q failed (%s): %s", e.Plugin, e.Handler, kind, e.Msg)
}

// IsFatal reports whether err is a failure the plugin marked fatal. Every
// other error from Call (retryable failures, crashes, timeouts, a plugin
// that is restarting or closed) is retryable.
func IsFatal(err error) bool {
	var ce *CallError
	return errors.As(err, &ce) && ce.Fatal
}

// Retryable errors Call wraps (with %w) when the call did not get an answer
// from the handler; IsFatal is false for all of them.
var (
	// ErrCrashed: the plugin process exited, or its connection broke, while
	// the call was in flight. The plugin is being restarted.
	ErrCrashed = errors.New("plugin process exited during the call")
	// ErrHung: the plugin answered nothing, to any call, for a while after
	// a call timed out, or a write of calls to it stalled. The plugin is
	// being restarted.
	ErrHung = errors.New("plugin stopped answering")
	// ErrTimeout: no answer within the per-call timeout.
	ErrTimeout = errors.New("no answer within the plugin timeout")
	// ErrUnavailable: the plugin was not running (restarting after a crash)
	// for as long as the call could wait.
	ErrUnavailable = errors.New("plugin is not running")
	// ErrClosed: the Plugin was closed.
	ErrClosed = errors.New("plugin is closed")
	// ErrProtocol: the plugin answered something the protocol does not allow.
	ErrProtocol = errors.New("plugin broke the protocol")
)

// ChecksumError refuses a plugin binary whose sha256 differs from the one
// the flow file declares.
type ChecksumError struct {
	Plugin   string
	Path     string
	Expected string // hex, as declared
	Actual   string // hex, of the file on disk
}

// Error names the plugin, both sums and the two ways to fix the mismatch.
func (e *ChecksumError) Error() string {
	return fmt.Sprintf("plugin %q: refusing to start %s: its sha256 is %s but the flow file declares sha256 %s; "+
		"install the binary the flow was written for, or, if this binary is the one you trust, set sha256: %q for plugin %q in the flow file",
		e.Plugin, e.Path, e.Actual, e.Expected, e.Actual, e.Plugin)
}
