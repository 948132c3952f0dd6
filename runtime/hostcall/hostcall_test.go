package hostcall

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/plugins/host"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// fakePlugin answers every call with res and err, and keeps the request.
type fakePlugin struct {
	req host.Request
	res host.Result
	err error
}

func (f *fakePlugin) Call(_ context.Context, req host.Request) (host.Result, error) {
	f.req = req
	return f.res, f.err
}

func TestCallGivesTheHandlerTheEnvelopeWithoutTheRuntimesHeaders(t *testing.T) {
	received := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	env := decide.Envelope{MessageID: "m-1", Type: "Order", CorrelationID: "c-1", Attempt: 2,
		Headers: decide.Table{"tenant": "acme", plan.HeaderAttempt: int64(2), plan.HeaderSlip: "{}", "n": int64(7)}}
	p := &fakePlugin{res: host.Result{Payload: []byte(`{"ok":true}`)}}
	res, err := Call(t.Context(), p, Request{Handler: "stock.reserve", Envelope: env, Payload: []byte(`{}`), Queue: "shop.reserve", ReceivedAt: received,
		Compensate: true, StepOutput: []byte(`{"id":1}`)})
	if err != nil || string(res.Payload) != `{"ok":true}` || res.Stop {
		t.Fatalf("Call = %+v, %v; want the plugin's payload", res, err)
	}
	got := p.req
	if got.Handler != "reserve" || got.Envelope.MessageID != "m-1" || got.Envelope.Attempt != 2 || got.Envelope.Queue != "shop.reserve" ||
		!got.Envelope.ReceivedAt.Equal(received) || !got.Compensate || string(got.StepOutput) != `{"id":1}` {
		t.Errorf("the plugin was asked %+v; want handler reserve, the envelope, queue, receipt time and the compensation's step output", got)
	}
	if len(got.Envelope.Headers) != 2 || got.Envelope.Headers["tenant"] != "acme" || got.Envelope.Headers["n"] != "7" {
		t.Errorf("the handler saw headers %v, want tenant and n only, as text", got.Envelope.Headers)
	}
}

func TestCallMarksAFatalFailureFatal(t *testing.T) {
	_, err := Call(t.Context(), &fakePlugin{err: &host.CallError{Fatal: true, Msg: "bad card"}}, Request{Handler: "pay.charge"})
	if !errors.Is(err, decide.ErrFatal) {
		t.Errorf("Call with a fatal plugin error = %v, want it to wrap decide.ErrFatal", err)
	}
	_, err = Call(t.Context(), &fakePlugin{err: host.ErrCrashed}, Request{Handler: "pay.charge"})
	if err == nil || errors.Is(err, decide.ErrFatal) {
		t.Errorf("Call with a crashed plugin = %v, want a retryable error", err)
	}
}

func TestKeySharesOneProcessBetweenPluginsDeclaredAlike(t *testing.T) {
	a := plan.Plugin{Name: "a", Path: "./p", Args: []string{"-v"}, Env: map[string]string{"X": "1", "Y": "2"}}
	b := plan.Plugin{Name: "b", Path: "./p", Args: []string{"-v"}, Env: map[string]string{"Y": "2", "X": "1"}}
	c := plan.Plugin{Name: "c", Path: "./p", Args: []string{"-v"}, Env: map[string]string{"X": "2"}}
	if Key(a) != Key(b) || Key(a) == Key(c) {
		t.Errorf("Key: a %q, b %q, c %q; want a and b alike (the same command, args and env), c apart", Key(a), Key(b), Key(c))
	}
}
