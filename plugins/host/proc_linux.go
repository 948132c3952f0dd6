package host

import (
	"errors"
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
