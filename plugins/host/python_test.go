package host

import (
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestPythonPlugin starts examples/plugins/python-echo, a plugin written
// without the Go SDK, through the same Start as every plugin (AutoMTLS on)
// and calls its echo handler: the proof that a step can be written in any
// language gRPC speaks.
func TestPythonPlugin(t *testing.T) {
	const python = "/usr/bin/python3"
	check := exec.Command(python, "-c", "import grpc, google.protobuf, cryptography")
	if out, err := check.CombinedOutput(); err != nil {
		t.Skipf("%s cannot import grpc, google.protobuf and cryptography (install python3-grpcio, python3-protobuf, python3-cryptography): %v: %s", python, err, out)
	}
	_, file, _, _ := runtime.Caller(0)
	script, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", "..", "examples", "plugins", "python-echo", "plugin.py"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(t.Context(), Config{Name: "pyecho", Command: script, Logger: testLogger(t)})
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

	hs := p.Handlers()
	if len(hs) != 1 || hs[0].Name != "echo" {
		t.Fatalf("Handlers() = %+v, want [echo]", hs)
	}
	payload := []byte(`{"order_id":"o-1","total":12.5}`)
	res, err := p.Call(t.Context(), Request{Handler: "echo", Envelope: Envelope{MessageID: "m-1", Attempt: 1}, Payload: payload})
	if err != nil || res.Stop || string(res.Payload) != string(payload) {
		t.Fatalf("Call(echo) = {Stop:%v Payload:%q}, %v; want the payload back", res.Stop, res.Payload, err)
	}
	_, err = p.Call(t.Context(), Request{Handler: "nope", Payload: payload})
	var ce *CallError
	if !errors.As(err, &ce) || !ce.Fatal {
		t.Fatalf("Call(nope) error = %v, want a fatal *CallError", err)
	}
}
