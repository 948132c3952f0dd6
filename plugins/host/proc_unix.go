//go:build unix && !linux

package host

import (
	"errors"
	"os"
	"syscall"
)

// childProcAttr puts the plugin in its own process group. Outside Linux
// there is no parent-death signal: a runtime killed with SIGKILL leaves its
// plugins running.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// execByDescriptor: without /proc/self/fd, the child runs the executable by
// its path (checked just before).
func execByDescriptor(*os.File) (string, bool) { return "", false }
