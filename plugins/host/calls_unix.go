//go:build unix

package host

import (
	"os"
	"syscall"
)

// callSocketPair returns the two ends of a new socket pair for the call
// socket: the host's, and the one the plugin process inherits. Only the
// host's end is close-on-exec; exec.Cmd passes the child's end as an extra
// file.
func callSocketPair() (host, child *os.File, err error) {
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	return os.NewFile(uintptr(fds[0]), "acemq-calls-host"), os.NewFile(uintptr(fds[1]), "acemq-calls-plugin"), nil
}

// callSocketReady reports whether the plugin has written to its end of the
// call socket: whether bytes wait on f, without reading them or waiting.
func callSocketReady(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var n int
	var rerr error
	var b [1]byte
	if err := rc.Control(func(fd uintptr) {
		n, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil {
		return false
	}
	return rerr == nil && n == 1
}
