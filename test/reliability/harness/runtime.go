package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Runtime is `acemq-flow run` as a child process of the test, killed when
// the test ends. Its stderr (the log, plugin stderr included) is kept.
type Runtime struct {
	Admin string // the admin listener's address
	Token string // the admin token Get sends, if any
	cmd   *exec.Cmd
	mu    sync.Mutex
	log   bytes.Buffer
	lines chan string
	done  chan struct{}
	err   error
}

// StartRuntime starts binary run with args (after --amqp amqpURL, a free
// --admin and, unless args name one, the test's own --blobs directory,
// shared by every runtime the test starts) and waits until it logs
// "runtime started"; it fails the test if the runtime exits or does not
// start within a minute.
func StartRuntime(t testing.TB, binary, amqpURL string, args ...string) *Runtime {
	t.Helper()
	admin := FreeAddr(t)
	full := []string{"run", "--amqp", amqpURL, "--admin", admin, "--management", "off"}
	if !slices.ContainsFunc(args, func(a string) bool { return a == "--blobs" || strings.HasPrefix(a, "--blobs=") }) {
		full = append(full, "--blobs", "file:"+blobsDir(t))
	}
	full = append(full, args...)
	cmd := exec.Command(binary, full...)
	cmd.Env = os.Environ()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	r := &Runtime{Admin: admin, cmd: cmd, lines: make(chan string, 1<<14), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			r.mu.Lock()
			r.log.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
			select {
			case r.lines <- sc.Text():
			default:
			}
		}
		r.err = cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() { r.Kill() })
	if !r.WaitLog(`msg="runtime started"`, time.Minute) {
		t.Fatalf("the runtime did not start within a minute; its log:\n%s", Tail(r.Log(), 40))
	}
	return r
}

// blobsDirs holds each running test's blob store directory.
var blobsDirs sync.Map // testing.TB → string

// blobsDir is t's blob store directory, made at its first runtime and
// removed with the test.
func blobsDir(t testing.TB) string {
	if d, ok := blobsDirs.Load(t); ok {
		return d.(string)
	}
	d := t.TempDir()
	blobsDirs.Store(t, d)
	t.Cleanup(func() { blobsDirs.Delete(t) })
	return d
}

// PID is the runtime's process id.
func (r *Runtime) PID() int { return r.cmd.Process.Pid }

// Log is everything the runtime wrote to stderr so far.
func (r *Runtime) Log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

// Count is how many log lines so far contain s.
func (r *Runtime) Count(s string) int {
	n := 0
	for _, l := range strings.Split(r.Log(), "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// WaitLog waits for a log line containing s; false when the process ended
// or d passed first.
func (r *Runtime) WaitLog(s string, d time.Duration) bool {
	if strings.Contains(r.Log(), s) {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case l := <-r.lines:
			if strings.Contains(l, s) {
				return true
			}
		case <-r.done:
			return strings.Contains(r.Log(), s)
		case <-timer.C:
			return strings.Contains(r.Log(), s)
		}
	}
}

// Signal sends sig to the runtime.
func (r *Runtime) Signal(sig syscall.Signal) { _ = r.cmd.Process.Signal(sig) }

// Wait waits up to d for the runtime to exit and returns its exit error;
// ok is false when it was still running at d.
func (r *Runtime) Wait(d time.Duration) (err error, ok bool) {
	select {
	case <-r.done:
		return r.err, true
	case <-time.After(d):
		return nil, false
	}
}

// Kill sends SIGKILL and waits for the process to be reaped.
func (r *Runtime) Kill() {
	select {
	case <-r.done:
		return
	default:
	}
	r.Signal(syscall.SIGKILL)
	<-r.done
}

// Get fetches path from the admin listener and returns the body and
// status.
func (r *Runtime) Get(path string) (string, int, error) {
	c := http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, "http://"+r.Admin+path, nil)
	if err != nil {
		return "", 0, err
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// Metric reads one sample from /metrics: the first line starting with
// series (a name with its labels, as exposed).
func (r *Runtime) Metric(series string) (float64, error) {
	body, _, err := r.Get("/metrics")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, series+" ") {
			var v float64
			_, err := fmt.Sscan(strings.Fields(l)[1], &v)
			return v, err
		}
	}
	return 0, fmt.Errorf("/metrics has no series %s", series)
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RunOnce runs binary with args to its end (at most d) and returns its
// combined output and exit error: for a command expected to fail.
func RunOnce(binary string, d time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	return string(out), err
}
