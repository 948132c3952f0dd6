package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTestkit starts the testkit plugin binary with cfg's non-zero fields
// and closes it when the test ends.
func startTestkit(t *testing.T, cfg Config) *Plugin {
	t.Helper()
	cfg.Name = "testkit"
	if cfg.Command == "" {
		cfg.Command = testkitBin
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	p, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Start(testkit): %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// testLogger sends the host's log to the test's log (visible with -v or on
// failure).
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// assertCalls checks which transport p's calls travel over.
func assertCalls(t *testing.T, p *Plugin, want string) {
	t.Helper()
	if got := p.cur.Load().calls; got != want {
		t.Errorf("the plugin's calls travel over %q, want %q", got, want)
	}
}

func TestCall(t *testing.T) {
	p := startTestkit(t, Config{})
	// A plugin built with the SDK serves its calls on the call socket.
	assertCalls(t, p, "socket")
	first := time.Date(2026, 9, 9, 14, 3, 11, 0, time.UTC)
	env := Envelope{MessageID: "m-1", CorrelationID: "c-1", Attempt: 1, FirstSeen: first}

	tests := []struct {
		name      string
		handler   string
		payload   string
		attempt   int
		want      Result
		wantErr   bool
		wantFatal bool
	}{
		{name: "echo returns its input", handler: "echo", payload: `{"a":1}`, want: Result{Payload: []byte(`{"a":1}`)}},
		{name: "stop returns nothing", handler: "stop", payload: `{}`, want: Result{Stop: true}},
		{name: "fail is a retryable failure", handler: "fail", payload: `{}`, wantErr: true},
		{name: "fatal is a fatal failure", handler: "fatal", payload: `{}`, wantErr: true, wantFatal: true},
		{name: "flaky fails while the attempt is within fail_attempts", handler: "flaky", payload: `{"fail_attempts":2}`, attempt: 2, wantErr: true},
		{name: "flaky succeeds once the attempt exceeds fail_attempts", handler: "flaky", payload: `{"fail_attempts":2}`, attempt: 3, want: Result{Payload: []byte(`{"fail_attempts":2}`)}},
		{name: "an unknown handler is a fatal failure", handler: "nope", payload: `{}`, wantErr: true, wantFatal: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := env
			if tc.attempt != 0 {
				e.Attempt = tc.attempt
			}
			got, err := p.Call(t.Context(), Request{Handler: tc.handler, Envelope: e, Payload: []byte(tc.payload)})
			if tc.wantErr {
				var ce *CallError
				if !errors.As(err, &ce) {
					t.Fatalf("Call(%s) = %v, %v; want a *CallError", tc.handler, got, err)
				}
				if IsFatal(err) != tc.wantFatal || ce.Fatal != tc.wantFatal {
					t.Fatalf("Call(%s): IsFatal = %v, want %v (%v)", tc.handler, IsFatal(err), tc.wantFatal, err)
				}
				if ce.Plugin != "testkit" || ce.Handler != tc.handler || ce.Msg == "" {
					t.Fatalf("Call(%s): CallError = %+v, want plugin, handler and message", tc.handler, ce)
				}
				return
			}
			if err != nil {
				t.Fatalf("Call(%s): %v", tc.handler, err)
			}
			if got.Stop != tc.want.Stop || !bytes.Equal(got.Payload, tc.want.Payload) {
				t.Fatalf("Call(%s) = {Stop:%v Payload:%q}, want {Stop:%v Payload:%q}", tc.handler, got.Stop, got.Payload, tc.want.Stop, tc.want.Payload)
			}
		})
	}

	t.Run("handlers are described", func(t *testing.T) {
		var names []string
		for _, h := range p.Handlers() {
			names = append(names, h.Name)
		}
		want := "crash echo fail fatal flaky sleep stop"
		if got := strings.Join(names, " "); got != want {
			t.Fatalf("Handlers() = %s, want %s", got, want)
		}
		live, err := p.Describe(t.Context())
		if err != nil || len(live) != len(names) {
			t.Fatalf("Describe() = %v, %v; want %d handlers", live, err, len(names))
		}
	})
}

func TestConcurrentCalls(t *testing.T) {
	p := startTestkit(t, Config{})
	const n = 1000
	const sleepMS = 300
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			payload := fmt.Sprintf(`{"ms":%d,"i":%d}`, sleepMS, i)
			res, err := p.Call(t.Context(), Request{Handler: "sleep", Envelope: Envelope{Attempt: 1}, Payload: []byte(payload)})
			switch {
			case err != nil:
				errs <- fmt.Errorf("call %d: %w", i, err)
			case string(res.Payload) != payload:
				errs <- fmt.Errorf("call %d answered %q, want its own payload %q", i, res.Payload, payload)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// One at a time, 1,000 calls of 300 ms take 300 s; all in flight at once,
	// about 300 ms plus the transport.
	if elapsed := time.Since(start); elapsed > 15*time.Second {
		t.Fatalf("%d concurrent %d ms calls took %s; they did not run concurrently", n, sleepMS, elapsed)
	}
}

func TestCrashMidCall(t *testing.T) {
	p := startTestkit(t, Config{})
	oldPid := p.Pid()

	// Calls in flight when the process dies fail too, as retryable.
	var wg sync.WaitGroup
	inflight := make(chan error, 5)
	for range 5 {
		wg.Go(func() {
			_, err := p.Call(t.Context(), Request{Handler: "sleep", Payload: []byte(`{"ms":60000}`)})
			inflight <- err
		})
	}
	_, err := p.Call(t.Context(), Request{Handler: "crash", Payload: []byte(`{}`)})
	if err == nil || IsFatal(err) || !errors.Is(err, ErrCrashed) {
		t.Fatalf("Call(crash) error = %v; want a retryable error wrapping ErrCrashed", err)
	}
	wg.Wait()
	close(inflight)
	for err := range inflight {
		if err == nil || IsFatal(err) || !errors.Is(err, ErrCrashed) {
			t.Errorf("Call(sleep) in flight during the crash: error = %v; want ErrCrashed, retryable", err)
		}
	}

	res, err := p.Call(t.Context(), Request{Handler: "echo", Payload: []byte(`"after"`)})
	if err != nil || string(res.Payload) != `"after"` {
		t.Fatalf("Call(echo) after the crash = %q, %v; want the payload back from the restarted plugin", res.Payload, err)
	}
	if got := p.Restarts(); got != 1 {
		t.Fatalf("Restarts() = %d, want 1", got)
	}
	if newPid := p.Pid(); newPid == oldPid || newPid == 0 {
		t.Fatalf("Pid() after restart = %d, old pid %d; want a new process", newPid, oldPid)
	}
	waitGone(t, oldPid, 5*time.Second)
}

func TestHangPastTimeout(t *testing.T) {
	p := startTestkit(t, Config{Timeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := p.Call(t.Context(), Request{Handler: "sleep", Payload: []byte(`{"ms":60000}`)})
	elapsed := time.Since(start)
	if err == nil || IsFatal(err) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("Call(sleep 60s) with a 300ms timeout: error = %v; want a retryable error wrapping ErrTimeout", err)
	}
	if elapsed < 300*time.Millisecond || elapsed > 3*time.Second {
		t.Fatalf("Call(sleep 60s) with a 300ms timeout returned after %s", elapsed)
	}
	// The plugin is not at fault for one slow call: it keeps serving.
	res, err := p.Call(t.Context(), Request{Handler: "echo", Payload: []byte(`1`)})
	if err != nil || string(res.Payload) != "1" {
		t.Fatalf("Call(echo) after a timeout = %q, %v", res.Payload, err)
	}
	if p.Restarts() != 0 {
		t.Fatalf("Restarts() = %d after a timeout, want 0", p.Restarts())
	}
}

func TestCallerContextCancelled(t *testing.T) {
	p := startTestkit(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := p.Call(ctx, Request{Handler: "sleep", Payload: []byte(`{"ms":60000}`)})
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || IsFatal(err) {
			t.Fatalf("Call with a cancelled context: error = %v; want context.Canceled, retryable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Call did not return within 5s of its context being cancelled")
	}
}

func TestChecksum(t *testing.T) {
	actual, err := fileSHA256(testkitBin)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a mismatch is refused naming both sums and the fix", func(t *testing.T) {
		wrong := strings.Repeat("ab", 32)
		_, err := Start(t.Context(), Config{Name: "testkit", Command: testkitBin, SHA256: wrong})
		var ce *ChecksumError
		if !errors.As(err, &ce) {
			t.Fatalf("Start with a wrong sha256: error = %v; want a *ChecksumError", err)
		}
		if ce.Expected != wrong || ce.Actual != actual || ce.Plugin != "testkit" {
			t.Fatalf("ChecksumError = %+v; want expected %s, actual %s", ce, wrong, actual)
		}
		msg := err.Error()
		for _, want := range []string{`plugin "testkit"`, wrong, actual, "set sha256"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q does not mention %q", msg, want)
			}
		}
		if pids := processesRunning(t, testkitBin); len(pids) > 0 {
			t.Errorf("a refused plugin was started: pids %v", pids)
		}
	})
	t.Run("a matching sum starts", func(t *testing.T) {
		p := startTestkit(t, Config{SHA256: strings.ToUpper(actual)})
		if _, err := p.Call(t.Context(), Request{Handler: "echo", Payload: []byte(`1`)}); err != nil {
			t.Fatal(err)
		}
		// The call socket comes after the executable's descriptor.
		assertCalls(t, p, "socket")
	})
	t.Run("the file run is the file hashed", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("the executable is run by its descriptor on Linux only")
		}
		// A binary swapped in at the path between the check and the start
		// is not the one that runs.
		dir := t.TempDir()
		path := filepath.Join(dir, "plugin")
		copyFile(t, testkitBin, path)
		var before syscall.Stat_t
		if err := syscall.Stat(path, &before); err != nil {
			t.Fatal(err)
		}
		r, err := newProcRunner(Config{Name: "testkit", Command: path, SHA256: actual}, &exec.Cmd{})
		if err != nil {
			t.Fatal(err)
		}
		copyFile(t, noHandshakeBin, path+".new")
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = r.Kill(context.Background())
			_ = r.Wait(context.Background())
		})
		var ran syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/exe", r.Pid()), &ran); err != nil {
			t.Fatal(err)
		}
		if ran.Ino != before.Ino {
			t.Fatalf("the process runs inode %d; the file hashed was inode %d (the one swapped in is another)", ran.Ino, before.Ino)
		}
	})
	t.Run("a malformed sum is refused", func(t *testing.T) {
		_, err := Start(t.Context(), Config{Name: "testkit", Command: testkitBin, SHA256: "xyz"})
		if err == nil || !strings.Contains(err.Error(), "not 64 hexadecimal digits") {
			t.Fatalf("Start with sha256 xyz: error = %v", err)
		}
	})
}

func TestNeverHandshakes(t *testing.T) {
	start := time.Now()
	_, err := Start(t.Context(), Config{Name: "mute", Command: noHandshakeBin, StartTimeout: 500 * time.Millisecond, Logger: testLogger(t)})
	if err == nil {
		t.Fatal("Start of a binary that never handshakes succeeded")
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("Start gave up after %s, want about the 500ms start timeout", elapsed)
	}
	for _, want := range []string{`plugin "mute"`, "did not complete the go-plugin handshake within 500ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if pids := processesRunning(t, noHandshakeBin); len(pids) > 0 {
		t.Fatalf("processes left behind after a failed start: %v", pids)
	}
}

func TestNotAPlugin(t *testing.T) {
	_, err := Start(t.Context(), Config{Name: "true", Command: "/bin/true", StartTimeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited before completing the go-plugin handshake") {
		t.Fatalf("Start(/bin/true) error = %v", err)
	}
	_, err = Start(t.Context(), Config{Name: "missing", Command: "/nonexistent/plugin"})
	if err == nil || !strings.Contains(err.Error(), "cannot run /nonexistent/plugin") {
		t.Fatalf("Start(/nonexistent/plugin) error = %v", err)
	}
}

func TestCloseLeavesNoProcess(t *testing.T) {
	p, err := Start(t.Context(), Config{Name: "testkit", Command: testkitBin})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	if processGone(pid) {
		t.Fatalf("plugin pid %d not running after Start", pid)
	}
	inflight := make(chan error, 1)
	go func() {
		_, err := p.Call(context.Background(), Request{Handler: "sleep", Payload: []byte(`{"ms":60000}`)})
		inflight <- err
	}()
	// Close only once the call is on its way, or it would find the plugin
	// closed and fail without testing a call cut short.
	waitPending(t, p, 1)
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close waits for the exit and reaps the process: nothing is left, not
	// even a zombie.
	if st := processState(pid); st != "" {
		t.Fatalf("after Close, /proc/%d still exists (state %s)", pid, st)
	}
	select {
	case err := <-inflight:
		if err == nil || IsFatal(err) {
			t.Fatalf("call in flight during Close: error = %v, want retryable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("call in flight did not return after Close")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err = p.Call(t.Context(), Request{Handler: "echo"})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Call after Close: error = %v, want ErrClosed", err)
	}
}

func TestKill9LeavesNoOrphan(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+testkitBin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := readLine(t, bufio.NewReader(out), 30*time.Second)
	pid, err := strconv.Atoi(strings.TrimPrefix(line, "pid: "))
	if err != nil || pid == 0 {
		t.Fatalf("child runtime said %q, want its plugin's pid", line)
	}
	if processGone(pid) {
		t.Fatalf("plugin %d not running before the runtime is killed", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// Pdeathsig: the kernel kills the plugin when its parent dies.
	waitGone(t, pid, 5*time.Second)
}

func TestRestartDelay(t *testing.T) {
	tests := []struct {
		quick int
		want  time.Duration
	}{
		{0, 0},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{5, 1600 * time.Millisecond},
		{9, 25600 * time.Millisecond},
		{10, 30 * time.Second},
		{1000, 30 * time.Second},
	}
	for _, tc := range tests {
		if got := restartDelay(tc.quick); got != tc.want {
			t.Errorf("restartDelay(%d) = %s, want %s", tc.quick, got, tc.want)
		}
	}
}

// TestRestartRefusesChangedBinary replaces the plugin's executable while it
// runs, then crashes it: the restart is refused by the checksum, and calls
// fail as retryable (ErrUnavailable, naming the mismatch) instead of
// running a binary the flow did not declare.
func TestRestartRefusesChangedBinary(t *testing.T) {
	dir := t.TempDir()
	bin := dir + "/testkit"
	copyFile(t, testkitBin, bin)
	sum, err := fileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	p := startTestkit(t, Config{Command: bin, SHA256: sum, Timeout: time.Second})
	other := dir + "/other"
	copyFile(t, noHandshakeBin, other)
	if err := os.Rename(other, bin); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Call(t.Context(), Request{Handler: "crash"}); !errors.Is(err, ErrCrashed) {
		t.Fatalf("Call(crash) error = %v, want ErrCrashed", err)
	}
	_, err = p.Call(t.Context(), Request{Handler: "echo", Payload: []byte("1")})
	if !errors.Is(err, ErrUnavailable) || IsFatal(err) || !strings.Contains(err.Error(), "refusing to start") {
		t.Fatalf("Call(echo) after the binary changed: error = %v; want ErrUnavailable naming the checksum refusal", err)
	}
	if p.Restarts() != 0 {
		t.Fatalf("Restarts() = %d, want 0: the changed binary must not run", p.Restarts())
	}
	if pids := processesRunning(t, bin); len(pids) > 0 {
		t.Fatalf("the changed binary is running: pids %v", pids)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// waitPending waits until n calls await their answer from p's process.
func waitPending(t *testing.T, p *Plugin, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := 0
		if inst := p.cur.Load(); inst != nil {
			inst.mu.Lock()
			got = len(inst.pending)
			inst.mu.Unlock()
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d call(s) pending after 10s, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFailedStartsLeaveNoSocketFolder: go-plugin makes a folder for the
// plugin's socket before it runs the command and removes it only for a
// process that started; every failed start or restart left one behind.
func TestFailedStartsLeaveNoSocketFolder(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	for _, cmd := range []string{"/nonexistent/plugin", "/bin/true"} {
		if _, err := Start(t.Context(), Config{Name: "bad", Command: cmd, StartTimeout: 5 * time.Second}); err == nil {
			t.Fatalf("Start(%s) succeeded", cmd)
		}
		entries, err := os.ReadDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			t.Errorf("after a failed start of %s, %s is left in the temporary folder", cmd, e.Name())
		}
	}
}

// A message id or header that is not UTF-8 (AMQP carries any bytes) does
// not fail the batch its call travels in: it reaches the plugin as text,
// and the plugin is not restarted.
func TestEnvelopeBytesThatAreNotTextAreCarried(t *testing.T) {
	for _, grpcCalls := range []bool{false, true} {
		p := startTestkit(t, Config{grpcCalls: grpcCalls})
		env := Envelope{MessageID: "m-\xff", Attempt: 1, Headers: map[string]string{"x-k\xfe": "v\xff", "ok": "fine"}}
		res, err := p.Call(t.Context(), Request{Handler: "echo", Envelope: env, Payload: []byte(`1`)})
		if err != nil || string(res.Payload) != "1" {
			t.Fatalf("Call(echo) with bytes that are not UTF-8 in its envelope (gRPC %v) = %q, %v; want the payload back", grpcCalls, res.Payload, err)
		}
		if n := p.Restarts(); n != 0 {
			t.Fatalf("the plugin was restarted %d times (gRPC %v)", n, grpcCalls)
		}
	}
}
