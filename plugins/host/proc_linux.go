package host

import (
	"errors"
	"os"
	"syscall"
)

// childProcAttr puts the plugin in its own process group, so that the host
// can kill it with everything it started, and asks the kernel to SIGKILL it
// when the runtime dies, so that `kill -9` of the runtime leaves no orphan.
// Pdeathsig fires when the OS thread that forked the child exits; the Go
// runtime keeps its threads for the life of the process unless a goroutine
// locked to one exits, which the host never does.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// execByDescriptor returns the path by which the child runs the open file f
// itself (its first extra descriptor, 3) when f is an ELF executable and
// /proc is mounted. A script is run by its path: its interpreter opens the
// script by the name it is given, and a script finds its own folder from it.
func execByDescriptor(f *os.File) (string, bool) {
	magic := make([]byte, 4)
	n, err := f.ReadAt(magic, 0)
	if err != nil || n != 4 || string(magic) != "\x7fELF" {
		return "", false
	}
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		return "", false
	}
	return "/proc/self/fd/3", true
}
