package main

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A wrong number of arguments is a usage error that says where help is.
func TestUsageErrorsPointToHelp(t *testing.T) {
	for _, args := range [][]string{{"validate"}, {"relay", "extra"}} {
		_, stderr, code := cli(t, args...)
		if code != 2 || !strings.Contains(stderr, "see `acemq-flow "+args[0]+" --help`") {
			t.Errorf("acemq-flow %s: exit %d, stderr %q; want 2 and a pointer to --help", strings.Join(args, " "), code, stderr)
		}
	}
}

type fullDisk struct{}

func (fullDisk) Write([]byte) (int, error) {
	return 0, &fs.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.ENOSPC}
}

// Output that cannot be written is a failed operation (1), not a usage
// error (2).
func TestAFailedWriteExitsOne(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"plan", "../../examples/flows"}, strings.NewReader(""), fullDisk{}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "no space left") {
		t.Fatalf("plan to a full disk: exit %d, stderr %q; want 1 and the write's error", code, stderr.String())
	}
}

// Ctrl-C ends a wait on standard input and on an admin API that does not
// answer.
func TestCtrlCEndsWaits(t *testing.T) {
	hung := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hung.Close()
	never, _ := io.Pipe() // a standard input that never ends
	for name, args := range map[string][]string{
		"send --data -":  {"send", "--exchange", "x", "--routing-key", "k", "--data", "-"},
		"consumers list": {"consumers", "list", "--admin", strings.TrimPrefix(hung.URL, "http://")},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			var out, errb bytes.Buffer
			done <- run(ctx, args, never, &out, &errb)
		}()
		// Still waiting a moment later: on the pipe, on the server.
		select {
		case code := <-done:
			t.Errorf("%s ended (exit %d) before Ctrl-C; want it waiting", name, code)
			cancel()
			continue
		case <-time.After(200 * time.Millisecond):
		}
		cancel()
		select {
		case code := <-done:
			if code != 1 {
				t.Errorf("%s interrupted: exit %d, want 1", name, code)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not end within 10s of Ctrl-C", name)
		}
		cancel()
	}
}
