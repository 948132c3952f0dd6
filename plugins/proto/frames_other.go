//go:build !unix

package proto

import "errors"

// checkCallFD: the host offers a call socket on Unix only.
func checkCallFD(int) error { return errors.New("call sockets are for Unix") }
