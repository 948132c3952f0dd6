package host

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

// stopProcess sends SIGSTOP to pid and, when the test ends, SIGCONT (the
// host kills a hung plugin it restarts; one it did not restart must not be
// left stopped for Close).
func stopProcess(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	// The signal is delivered asynchronously: until every thread has
	// stopped, the plugin may still answer a call.
	testenv.Eventually(t, 10*time.Second, func() error {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if len(tasks) == 0 {
			return testenv.Errorf("no threads of process %d", pid)
		}
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			if err != nil {
				return err
			}
			st := string(b)
			if i := strings.LastIndexByte(st, ')'); i < 0 || i+2 >= len(st) || st[i+2] != 'T' {
				return testenv.Errorf("%s is not stopped yet", task)
			}
		}
		return nil
	})
}

// waitRestarted waits until p was restarted once and a new process
// answers echo.
func waitRestarted(t *testing.T, p *Plugin, oldPid int, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, func() error {
		if n := p.Restarts(); n != 1 {
			return testenv.Errorf("Restarts() = %d, want 1", n)
		}
		if pid := p.Pid(); pid == 0 || pid == oldPid {
			return testenv.Errorf("Pid() = %d (old %d), want a new process", pid, oldPid)
		}
		res, err := p.Call(t.Context(), Request{Handler: "echo", Payload: []byte(`"again"`)})
		if err != nil || string(res.Payload) != `"again"` {
			return testenv.Errorf("Call(echo) after restart = %q, %v", res.Payload, err)
		}
		return nil
	})
}

// A hung plugin is killed first, not asked to stop: it could not answer
// go-plugin's graceful shutdown, whose wait (killGrace, then go-plugin's
// own) would keep its calls waiting for the replacement.
func TestHungPluginIsRestarted(t *testing.T) {
	var logs testenv.Buffer
	p := startTestkit(t, Config{Timeout: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, tWriter{t}), nil))})
	oldPid := p.Pid()
	stopProcess(t, oldPid)

	_, err := p.Call(t.Context(), Request{Handler: "echo", Payload: []byte(`1`)})
	if err == nil || IsFatal(err) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("Call(echo) to a stopped plugin: error = %v; want a retryable ErrTimeout", err)
	}
	waitRestarted(t, p, oldPid, 20*time.Second)
	waitGone(t, oldPid, 10*time.Second)
	if !strings.Contains(logs.String(), "plugin answers nothing; killing its process group") {
		t.Errorf("the host's log does not say it killed the hung plugin:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "plugin did not stop in time") {
		t.Errorf("the hung plugin was first asked to stop and waited for:\n%s", logs.String())
	}
}

func TestSlowHandlerWhileOthersAnswerIsNotRestarted(t *testing.T) {
	p := startTestkit(t, Config{Timeout: 500 * time.Millisecond})
	slow := make(chan error, 1)
	go func() {
		// The handler's context ends at the plugin's timeout, but it
		// answers nothing before it: the host's limit passes first.
		_, err := p.Call(t.Context(), Request{Handler: "sleep", Payload: []byte(`{"ms":60000}`)})
		slow <- err
	}()
	// Keep echo calls answered until the slow call has timed out, and on
	// through the hang grace after it (with a margin): a plugin taken for
	// hung would fail within it, and the echo calls with it.
	var slowErr error
	var end time.Time // zero until the slow call has returned
	for i := 0; end.IsZero() || time.Now().Before(end); i++ {
		select {
		case slowErr = <-slow:
			end = time.Now().Add(p.grace + 500*time.Millisecond)
		default:
		}
		payload := []byte(fmt.Sprint(i))
		res, err := p.Call(t.Context(), Request{Handler: "echo", Payload: payload})
		if err != nil || !bytes.Equal(res.Payload, payload) {
			t.Fatalf("Call(echo %d) while a slow call is pending = %q, %v", i, res.Payload, err)
		}
	}
	if !errors.Is(slowErr, ErrTimeout) {
		t.Fatalf("Call(sleep 60s) with a 500ms timeout: error = %v, want ErrTimeout", slowErr)
	}
	if n := p.Restarts(); n != 0 {
		t.Fatalf("Restarts() = %d after one slow call while others were answered, want 0", n)
	}
}

func TestWriteStalledOnStoppedPluginIsBounded(t *testing.T) {
	tests := []struct {
		name    string
		grpc    bool
		want    error
		because string
	}{
		// On the call socket the write stops once the socket's buffers
		// are full, and the write's bound fails the instance.
		{"call socket", false, ErrHung, "the write's bound fails the instance"},
		// gRPC queues one message whole while the stream has any write
		// quota left, so the write returns before flow control holds it:
		// the call waits for its answer and times out (the hang watcher
		// then fails the instance).
		{"grpc", true, ErrTimeout, "the call times out"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := startTestkit(t, Config{Timeout: time.Second, grpcCalls: tc.grpc})
			oldPid := p.Pid()
			stopProcess(t, oldPid)

			payload := bytes.Repeat([]byte("x"), 40<<20) // larger than any socket buffer or gRPC flow-control window
			done := make(chan error, 1)
			go func() {
				_, err := p.Call(t.Context(), Request{Handler: "echo", Payload: payload})
				done <- err
			}()
			select {
			case err := <-done:
				// Either way the call fails retryably and the plugin is
				// restarted.
				if err == nil || IsFatal(err) || !errors.Is(err, tc.want) {
					t.Fatalf("Call(echo 40 MiB) to a stopped plugin: error = %v; want a retryable %v (%s)", err, tc.want, tc.because)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("Call(echo 40 MiB) to a stopped plugin did not return within 15s (Timeout 1s)")
			}
			waitRestarted(t, p, oldPid, 20*time.Second)
			assertCalls(t, p, map[bool]string{false: "socket", true: "grpc"}[tc.grpc])
		})
	}
}
