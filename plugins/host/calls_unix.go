//go:build unix && !aix

package host

import (
	"os"
	"syscall"
)

// callSocketPair returns the two ends of a new socket pair for the call
// socket: the host's, and the one the plugin process inherits. Both are
// close-on-exec, so that no other child started meanwhile inherits them;
// exec.Cmd passes the plugin's end to it as an extra file.
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

// callSocketHello reports whether the plugin said it serves the call socket:
// whether the first frame waiting on f, without waiting for one, is an
// empty ResultBatch (a length of 0, four zero bytes). It takes that frame
// when it is; anything else is left, and the socket is not used.
func callSocketHello(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	if err := rc.Control(func(fd uintptr) {
		var b [4]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err != nil || n != len(b) || b != [4]byte{} {
			return
		}
		n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_DONTWAIT)
		ok = err == nil && n == len(b)
	}); err != nil {
		return false
	}
	return ok
}
