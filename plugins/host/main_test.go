package host

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Binaries built once for the package's tests.
var (
	testkitBin     string
	noHandshakeBin string
)

// childEnv makes the test binary act as a runtime that starts testkit and
// waits to be killed (TestKill9LeavesNoOrphan).
const childEnv = "ACEMQ_HOST_TEST_RUNTIME"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		runChildRuntime(path)
		return
	}
	dir, err := os.MkdirTemp("", "acemq-host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		builds := []struct {
			out *string
			pkg string
		}{
			{&testkitBin, "./examples/plugins/testkit"},
			{&noHandshakeBin, "./plugins/host/testdata/nohandshake"},
		}
		for _, b := range builds {
			*b.out = filepath.Join(dir, filepath.Base(b.pkg))
			cmd := exec.Command("go", "build", "-o", *b.out, b.pkg)
			cmd.Dir = root
			cmd.Stderr = os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "go build %s: %v\n", b.pkg, err)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// runChildRuntime starts the plugin at path, prints its pid and blocks
// until it is killed.
func runChildRuntime(path string) {
	p, err := Start(context.Background(), Config{Name: "testkit", Command: path})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("pid:", p.Pid())
	select {}
}

// processState returns the state letter of pid from /proc ("R", "S", "Z"...)
// or "" when there is no such process.
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// processGone reports whether pid no longer runs (absent, or a zombie
// waiting for a reaper that is not us).
func processGone(pid int) bool {
	st := processState(pid)
	return st == "" || st == "Z"
}

// processesRunning lists live processes whose command line starts with path.
func processesRunning(t *testing.T, path string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.HasPrefix(string(b), path+"\x00") && !processGone(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone waits until pid has exited, or fails the test after d.
func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running (state %s) after %s", pid, processState(pid), d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readLine reads one line from r with a deadline.
func readLine(t *testing.T, r *bufio.Reader, d time.Duration) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		line, _ := r.ReadString('\n')
		ch <- strings.TrimSpace(line)
	}()
	select {
	case line := <-ch:
		return line
	case <-time.After(d):
		t.Fatalf("no line within %s", d)
		return ""
	}
}
