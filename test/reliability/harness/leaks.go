package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Usage is a snapshot of one process's resources, read from /proc, and of
// the runtime's goroutines when its /metrics exposes go_goroutines.
type Usage struct {
	Goroutines int // -1 when unknown
	Threads    int
	FDs        int
	RSSKiB     int
	Plugins    int // live child processes (the plugins)
}

// Snapshot reads r's usage now.
func Snapshot(r *Runtime) Usage {
	u := ProcUsage(r.PID())
	u.Goroutines = -1
	if g, err := r.Metric("go_goroutines"); err == nil {
		u.Goroutines = int(g)
	}
	return u
}

// ProcUsage reads pid's threads, open file descriptors, resident memory
// and live children from /proc.
func ProcUsage(pid int) Usage {
	u := Usage{Goroutines: -1}
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		u.FDs = len(fds)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "Threads:":
				u.Threads, _ = strconv.Atoi(f[1])
			case "VmRSS:":
				u.RSSKiB, _ = strconv.Atoi(f[1])
			}
		}
	}
	u.Plugins = len(Children(pid))
	return u
}

// Children lists the live (not zombie) processes whose parent is pid.
func Children(pid int) []int {
	return processes(func(_ int, ppid int, _ string) bool { return ppid == pid })
}

// ProcessesOf lists the live processes running the executable exe (an
// absolute path), whoever their parent: plugins orphaned by a killed
// runtime are found this way.
func ProcessesOf(exe string) []int {
	return processes(func(pid int, _ int, _ string) bool {
		target, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
		return err == nil && target == exe
	})
}

func processes(match func(pid, ppid int, state string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		if match(pid, ppid, f[0]) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Leaks compares a snapshot after a scenario with one before it and
// describes growth beyond the slack allowed (goroutines and FDs: +20%
// and +10; RSS: +50%; plugins: any), or returns "" when there is none.
func Leaks(before, after Usage) string {
	var out []string
	grew := func(what string, b, a int, pct float64, abs int) {
		if b >= 0 && a >= 0 && float64(a) > float64(b)*(1+pct)+float64(abs) {
			out = append(out, fmt.Sprintf("%s %d→%d", what, b, a))
		}
	}
	grew("goroutines", before.Goroutines, after.Goroutines, 0.2, 10)
	grew("fds", before.FDs, after.FDs, 0.2, 10)
	grew("rss_kib", before.RSSKiB, after.RSSKiB, 0.5, 0)
	grew("plugins", before.Plugins, after.Plugins, 0, 0)
	return strings.Join(out, ", ")
}

func (u Usage) String() string {
	return fmt.Sprintf("goroutines %d, threads %d, fds %d, rss %d KiB, plugins %d", u.Goroutines, u.Threads, u.FDs, u.RSSKiB, u.Plugins)
}
