//go:build unix

package proto

import (
	"errors"
	"syscall"
)

// checkCallFD reports whether fd is what the host passes as the call
// socket: an open Unix-domain stream socket.
func checkCallFD(fd int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return errors.New("not a socket")
	}
	typ, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE)
	if err != nil {
		return err
	}
	if typ != syscall.SOCK_STREAM {
		return errors.New("not a stream socket")
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return err
	}
	if _, ok := sa.(*syscall.SockaddrUnix); !ok {
		return errors.New("not a Unix-domain socket")
	}
	return nil
}
