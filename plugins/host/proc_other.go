//go:build !unix

package host

import (
	"errors"
	"os"
	"syscall"
)

func childProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// execByDescriptor: without /proc/self/fd, the child runs the executable by
// its path (checked just before).
func execByDescriptor(*os.File) (string, bool) { return "", false }
