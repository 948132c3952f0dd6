package host

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
)

// TestPythonPlugin starts examples/plugins/python-echo, a plugin written
// without the Go SDK, through the same Start as every plugin (AutoMTLS on)
// and calls its echo handler: the proof that a step can be written in any
// language gRPC speaks.
//
// It needs a Python with grpc, protobuf and cryptography, named by
// ACEMQ_TEST_PYTHON (`make test` sets /usr/bin/python3, which `make
// services` equips): it skips only when that is unset, and fails when the
// Python named cannot import them.
func TestPythonPlugin(t *testing.T) {
	python := os.Getenv("ACEMQ_TEST_PYTHON")
	if python == "" {
		t.Skip("ACEMQ_TEST_PYTHON is unset; set it to a python3 with grpc, protobuf and cryptography (make test does)")
	}
	check := exec.Command(python, "-c", "import grpc, google.protobuf, cryptography")
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("%s (ACEMQ_TEST_PYTHON) cannot import grpc, google.protobuf and cryptography; run `make services`, which installs python3-grpcio, python3-protobuf and python3-cryptography: %v: %s", python, err, out)
	}
	_, file, _, _ := runtime.Caller(0)
	script, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", "..", "examples", "plugins", "python-echo", "plugin.py"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &recordWatch{want: "python plugin serving", seen: make(chan slog.Record, 1)}
	p, err := Start(t.Context(), Config{Name: "pyecho", Command: python, Args: []string{script}, Logger: slog.New(logs)})
	if err != nil {
		t.Fatalf("Start(%s): %v", script, err)
	}
	pid := p.Pid()
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if st := processState(pid); st != "" {
			t.Errorf("after Close, python plugin %d still exists (state %s)", pid, st)
		}
	})

	// The plugin ignores the call socket it is offered: calls go over gRPC.
	assertCalls(t, p, "grpc")
	hs := p.Handlers()
	if len(hs) != 2 || hs[0].Name != "echo" || hs[1].Name != "undo" {
		t.Fatalf("Handlers() = %+v, want [echo undo]", hs)
	}
	payload := []byte(`{"order_id":"o-1","total":12.5}`)
	res, err := p.Call(t.Context(), Request{Handler: "echo", Envelope: Envelope{MessageID: "m-1", Attempt: 1}, Payload: payload})
	if err != nil || res.Stop || string(res.Payload) != string(payload) {
		t.Fatalf("Call(echo) = {Stop:%v Payload:%q}, %v; want the payload back", res.Stop, res.Payload, err)
	}
	// A compensation reads what its own step returned, and every handler
	// the queue and the time of receipt.
	received := time.Date(2026, 9, 9, 14, 3, 12, 250000000, time.UTC)
	res, err = p.Call(t.Context(), Request{Handler: "undo", Compensate: true, Payload: payload, StepOutput: []byte(`{"payment":"p-1"}`),
		Envelope: Envelope{MessageID: "m-2", Attempt: 1, Queue: "place-order.take-payment.compensate", ReceivedAt: received}})
	want := `{"undid": {"payment": "p-1"}, "input": {"order_id": "o-1", "total": 12.5}, "queue": "place-order.take-payment.compensate", "received_at": "2026-09-09T14:03:12.250000+00:00"}`
	if err != nil || string(res.Payload) != want {
		t.Fatalf("Call(undo) = %q, %v; want %s", res.Payload, err, want)
	}
	var ce *CallError
	if _, err := p.Call(t.Context(), Request{Handler: "undo", Payload: payload}); !errors.As(err, &ce) || !ce.Fatal {
		t.Fatalf("Call(undo) as a step: error = %v, want a fatal *CallError", err)
	}
	_, err = p.Call(t.Context(), Request{Handler: "nope", Payload: payload})
	if !errors.As(err, &ce) || !ce.Fatal {
		t.Fatalf("Call(nope) error = %v, want a fatal *CallError", err)
	}

	// The plugin's JSON log line on stderr reaches the runtime's logger at
	// its own level, tagged with the plugin's name.
	select {
	case r := <-logs.seen:
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		if r.Level != slog.LevelInfo || attrs["plugin"] != "pyecho" || attrs["mtls"] != "true" {
			t.Fatalf("plugin log record = %s %q %v; want INFO with plugin=pyecho and mtls=true", r.Level, r.Message, attrs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin's stderr log line did not reach the logger within 10s")
	}
}

// recordWatch is a slog.Handler that hands over the first record with
// message want (with the attributes added by With).
type recordWatch struct {
	want  string
	seen  chan slog.Record
	attrs []slog.Attr
}

func (h *recordWatch) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordWatch) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.want {
		r = r.Clone()
		r.AddAttrs(h.attrs...)
		select {
		case h.seen <- r:
		default:
		}
	}
	return nil
}

func (h *recordWatch) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clone(h.attrs), as...)
	return &c
}

func (h *recordWatch) WithGroup(string) slog.Handler { return h }

// TestPlainStderrLinesAreLoggedAtInfo: a plugin that dies at start-up
// printing a plain line (a traceback) must show it in a log at Info, the
// runtime's default level; go-plugin logs such lines at Debug.
func TestPlainStderrLinesAreLoggedAtInfo(t *testing.T) {
	script := filepath.Join(t.TempDir(), "broken-plugin")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'Traceback: ModuleNotFoundError: No module named grpc' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	logs := &recordWatch{want: "Traceback: ModuleNotFoundError: No module named grpc", seen: make(chan slog.Record, 1)}
	if _, err := Start(t.Context(), Config{Name: "broken", Command: script, Logger: slog.New(logs), StartTimeout: 5 * time.Second}); err == nil {
		t.Fatal("Start of a plugin that exits at once succeeded")
	}
	select {
	case r := <-logs.seen:
		if r.Level != slog.LevelInfo {
			t.Errorf("the plugin's stderr line was logged at %s, want INFO", r.Level)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin's stderr line was not logged")
	}
}
