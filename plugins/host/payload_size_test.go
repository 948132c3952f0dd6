package host

import (
	"bytes"
	"crypto/rand"
	"testing"
	"time"
)

// A plugin receives the whole payload, however large the broker lets a
// message be (plugins/README.md, "Payload size"): 64 MiB reach testkit's
// echo and come back intact, over the call socket and over the gRPC Calls
// stream, and the plugin is not restarted for it.
func TestCallCarries64MiBBothWays(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 256 MiB through two plugin processes; skipped with -short")
	}
	payload := make([]byte, 64<<20)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		grpc bool
	}{{"the call socket", false}, {"the gRPC Calls stream", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := startTestkit(t, Config{Timeout: 2 * time.Minute, grpcCalls: tc.grpc})
			res, err := p.Call(t.Context(), Request{Handler: "echo", Envelope: Envelope{MessageID: "big", Attempt: 1}, Payload: payload})
			if err != nil {
				t.Fatalf("Call(echo) with a 64 MiB payload over %s: %v", tc.name, err)
			}
			if !bytes.Equal(res.Payload, payload) {
				t.Fatalf("Call(echo) with a 64 MiB payload over %s returned %d bytes, want the %d sent", tc.name, len(res.Payload), len(payload))
			}
			if n := p.Restarts(); n != 0 {
				t.Fatalf("the plugin was restarted %d times for a 64 MiB call over %s", n, tc.name)
			}
			// A small call after the large one still goes through.
			if res, err := p.Call(t.Context(), Request{Handler: "echo", Envelope: Envelope{MessageID: "small", Attempt: 1}, Payload: []byte(`{}`)}); err != nil || string(res.Payload) != `{}` {
				t.Fatalf("Call(echo) after the large call = %q, %v", res.Payload, err)
			}
		})
	}
}
