package harness

import (
	"os"
	"testing"
	"time"
)

// TestGeneratorOutcomes: a publish is ok only once the broker confirmed
// it, fail when it came back unroutable, and info when no confirm came:
// here the line to the broker held silent by the fault proxy, so the
// checker can count what it recovered.
func TestGeneratorOutcomes(t *testing.T) {
	raw := os.Getenv(AMQPEnv)
	if raw == "" || testing.Short() {
		t.Skipf("%s is unset or -short; run `make services` and set it to run the generator against the broker", AMQPEnv)
	}
	proxy, through := Before(t, raw, Listen)
	g := NewGenerator(t, through, "")
	g.ConfirmTimeout = time.Second
	q := "generator-test-" + Random(4)
	if _, err := g.ch.QueueDeclare(q, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := g.Publish(0, Message{ID: "routed", Key: q, Body: "{}"}, Message{ID: "unroutable", Key: q + "-nowhere", Body: "{}"}); err != nil {
		t.Fatal(err)
	}
	proxy.SetMode(Blackhole)
	t.Cleanup(func() { proxy.SetMode(Pass) }) // before the generator's connection closes
	if err := g.Publish(0, Message{ID: "silent", Key: q, Body: "{}"}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]Outcome{"routed": OK, "unroutable": Fail, "silent": Info} {
		if got := g.Sent.outcome[id]; got != want {
			t.Errorf("Publish(%s): outcome %d, want %d (ok 0, fail 1, info 2)", id, got, want)
		}
	}
	if n := len(g.Sent.IDs(OK)); n != 1 {
		t.Errorf("IDs(OK) = %d ids, want 1: only the confirmed publish", n)
	}
}
