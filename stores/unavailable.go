package stores

import (
	"errors"
	"fmt"
)

// ErrUnavailable is matched (errors.Is) by every *UnavailableError: the
// store could not be reached or did not answer, so nothing was decided.
var ErrUnavailable = errors.New("store unavailable")

// UnavailableError is a failure of the store itself rather than of what
// was asked of it: the connection was refused, reset or closed, the server
// is shutting down or restarting (PostgreSQL's class 08 and 57P0x), or a
// round trip ran out of time. The same request may succeed once the store
// answers again; a caller must not count it against the message it was
// handling, and may retry it when the request is idempotent (Confirm and
// Release are). Backends return it wrapped around the driver's error;
// Backend names the backend, never its URL.
type UnavailableError struct {
	Backend string // "postgres", "sqlite", "file"
	Err     error
}

// Error says which backend and what the driver said.
func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%s store unavailable: %v", e.Backend, e.Err)
}

// Unwrap returns the driver's error.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }
