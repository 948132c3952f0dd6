package host

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/plugins/proto"
	"github.com/acemq/acemq-flow/plugins/sdk"
)

// countingServer counts the calls the plugin receives on its stream.
type countingServer struct {
	proto.PluginServer
	calls atomic.Int64
}

func (s *countingServer) Calls(stream proto.Plugin_CallsServer) error {
	return s.PluginServer.Calls(&countingStream{Plugin_CallsServer: stream, calls: &s.calls})
}

type countingStream struct {
	proto.Plugin_CallsServer
	calls *atomic.Int64
}

func (s *countingStream) Recv() (*proto.CallBatch, error) {
	b, err := s.Plugin_CallsServer.Recv()
	s.calls.Add(int64(len(b.GetCalls())))
	return b, err
}

func TestCallWithEndedContextIsNotSent(t *testing.T) {
	srv, err := sdk.NewServer(map[string]sdk.Handler{
		"echo": {Func: func(_ context.Context, req *sdk.Request) (*sdk.Result, error) {
			return &sdk.Result{Payload: req.Payload}, nil
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingServer{PluginServer: srv}
	p := startInProcessServer(t, counting)

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	tests := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"a cancelled context is not sent", cancelled, context.Canceled},
		{"a context past its deadline is not sent", expired, context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Call(tc.ctx, Request{Handler: "echo", Payload: []byte(`1`)})
			if !errors.Is(err, tc.want) || IsFatal(err) {
				t.Fatalf("Call(echo) = %v, want %v, retryable", err, tc.want)
			}
		})
	}
	// The stream is ordered: once this call is answered, the plugin has
	// received everything sent before it.
	if _, err := p.Call(t.Context(), Request{Handler: "echo", Payload: []byte(`2`)}); err != nil {
		t.Fatalf("Call(echo) with a live context: %v", err)
	}
	if n := counting.calls.Load(); n != 1 {
		t.Fatalf("the plugin received %d calls, want 1: calls whose context had ended were sent", n)
	}
}

func TestRequestToProtoAlwaysSendsALimit(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 0, time.Nanosecond, time.Millisecond} {
		if ms := requestToProto(1, Request{}, d).GetTimeoutMs(); ms != 1 {
			t.Errorf("requestToProto(timeout %s): timeout_ms = %d, want 1 (0 means no limit)", d, ms)
		}
	}
}

// A call is sent with the time it has left when it is sent, not when it
// began: one that waited for a restart has less, and a plugin told it had
// the whole timeout would run past the host's wait and be taken for hung.
func TestACallTellsThePluginTheTimeItHasLeft(t *testing.T) {
	p := startInProcess(t, map[string]sdk.Handler{
		"deadline": {Func: func(ctx context.Context, _ *sdk.Request) (*sdk.Result, error) {
			d, ok := ctx.Deadline()
			if !ok {
				return &sdk.Result{Payload: []byte("none")}, nil
			}
			return &sdk.Result{Payload: []byte(strconv.FormatInt(time.Until(d).Milliseconds(), 10))}, nil
		}},
	})
	l, timer := p.limit(t.Context())
	defer releaseTimer(timer)
	// The call began 1.7 s of its 2 s ago (it waited for a restart).
	l.deadline = time.Now().Add(300 * time.Millisecond)
	inst, err := p.running(l)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := inst.call(l, Request{Handler: "deadline"})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := strconv.Atoi(string(resp.GetOutput().GetPayload()))
	if err != nil || ms > 300 {
		t.Fatalf("the handler had %s ms, want at most 300 (what the call had left)", resp.GetOutput().GetPayload())
	}
}

// A failure that reaches the host once the limit has passed is the handler
// stopped at that limit: the call timed out, on every path that can see the
// answer (it may come while the host is already giving up on the call).
func TestFailureAnsweredAtTheLimitIsTheTimeout(t *testing.T) {
	failure := &proto.HandleResponse{CallId: 1, Outcome: &proto.HandleResponse_Failure{Failure: &proto.Failure{Message: "interrupted"}}}
	output := &proto.HandleResponse{CallId: 1, Outcome: &proto.HandleResponse_Output{Output: &proto.Output{Payload: []byte("x")}}}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	past, future := time.Now().Add(-time.Millisecond), time.Now().Add(time.Hour)
	tests := []struct {
		name    string
		l       limit
		resp    *proto.HandleResponse
		wantErr error // nil: want resp back
	}{
		{"a failure after the limit", limit{ctx: context.Background(), deadline: past, err: ErrTimeout}, failure, ErrTimeout},
		{"a failure after the caller's context ended", limit{ctx: cancelled, deadline: future, err: ErrTimeout}, failure, context.Canceled},
		{"a failure within the limit", limit{ctx: context.Background(), deadline: future, err: ErrTimeout}, failure, nil},
		{"an output after the limit", limit{ctx: context.Background(), deadline: past, err: ErrTimeout}, output, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.l.answered(tc.resp)
			if tc.wantErr == nil {
				if err != nil || got != tc.resp {
					t.Fatalf("answered = %v, %v; want the answer", got, err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("answered = %v, %v; want %v", got, err, tc.wantErr)
			}
		})
	}
}
