package sdk

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	gproto "google.golang.org/protobuf/proto"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// fakeCalls is the server side of a call stream, fed by the test.
type fakeCalls struct {
	grpc.ServerStream // not used; nil
	ctx               context.Context
	in                chan *proto.CallBatch
	out               chan *proto.ResultBatch
}

func (f *fakeCalls) Context() context.Context { return f.ctx }

func (f *fakeCalls) Recv() (*proto.CallBatch, error) {
	b, ok := <-f.in
	if !ok {
		return nil, io.EOF
	}
	return b, nil
}

// Send copies b, as gRPC does: the sender reuses its batches.
func (f *fakeCalls) Send(b *proto.ResultBatch) error {
	f.out <- gproto.Clone(b).(*proto.ResultBatch)
	return nil
}

func TestCancelInTheSameBatchAsItsCall(t *testing.T) {
	cancelled := make(chan struct{})
	srv, err := NewServer(map[string]Handler{
		"wait": {Func: func(ctx context.Context, _ *Request) (*Result, error) {
			<-ctx.Done()
			close(cancelled)
			return nil, ctx.Err()
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	stream := &fakeCalls{ctx: t.Context(), in: make(chan *proto.CallBatch, 1), out: make(chan *proto.ResultBatch, 1)}
	served := make(chan error, 1)
	go func() { served <- srv.Calls(stream) }()

	stream.in <- &proto.CallBatch{
		Calls:  []*proto.HandleRequest{{CallId: 7, Handler: "wait"}},
		Cancel: []uint64{7},
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("a CallBatch holding call 7 and cancel 7: the handler's context was not cancelled within 10s")
	}
	select {
	case b := <-stream.out:
		if len(b.GetResults()) != 1 || b.GetResults()[0].GetCallId() != 7 {
			t.Fatalf("answers = %v, want one for call 7", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer for the cancelled call within 10s")
	}
	close(stream.in)
	if err := <-served; err != nil {
		t.Fatalf("Calls returned %v after the host closed the stream", err)
	}
}

// On the call socket the server first says it serves it (an empty
// ResultBatch), then answers calls there, and stops when the host closes
// its end, cancelling what still runs.
func TestServeSocket(t *testing.T) {
	cancelled := make(chan struct{})
	srv, err := NewServer(map[string]Handler{
		"echo": {Func: func(_ context.Context, r *Request) (*Result, error) { return &Result{Payload: r.Payload}, nil }},
		"wait": {Func: func(ctx context.Context, _ *Request) (*Result, error) {
			<-ctx.Done()
			close(cancelled)
			return nil, ctx.Err()
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, pluginEnd := net.Pipe()
	host := proto.NewFrames(hostEnd)
	served := make(chan error, 1)
	go func() { served <- srv.(*server).serveSocket(proto.NewFrames(pluginEnd)) }()

	var hello proto.ResultBatch
	if err := host.Read(&hello); err != nil || len(hello.GetResults()) != 0 {
		t.Fatalf("first frame on the call socket = %v, %v; want an empty ResultBatch", &hello, err)
	}
	if err := <-served; err != nil {
		t.Fatalf("serveSocket: %v", err)
	}
	call := &proto.CallBatch{Calls: []*proto.HandleRequest{
		{CallId: 1, Handler: "wait"},
		{CallId: 2, Handler: "echo", Payload: []byte("hi")},
	}}
	if err := host.Write(call); err != nil {
		t.Fatal(err)
	}
	var got proto.ResultBatch
	if err := host.Read(&got); err != nil {
		t.Fatal(err)
	}
	want := &proto.ResultBatch{Results: []*proto.HandleResponse{{CallId: 2,
		Outcome: &proto.HandleResponse_Output{Output: &proto.Output{Payload: []byte("hi")}}}}}
	if !gproto.Equal(&got, want) {
		t.Fatalf("answer on the call socket = %v, want %v", &got, want)
	}
	// The host goes away: the handler still running has its context
	// cancelled.
	host.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("a handler still running when the host closed the call socket was not cancelled within 10s")
	}
}

// An answer the socket cannot carry closes it: the host then restarts the
// plugin at once instead of waiting, call after call, for answers that the
// failed writer will never send.
func TestSocketSendFailureClosesTheSocket(t *testing.T) {
	hostEnd, pluginEnd := net.Pipe()
	s := socketStream{proto.NewFrames(pluginEnd)}
	bad := &proto.ResultBatch{Results: []*proto.HandleResponse{{CallId: 1,
		Outcome: &proto.HandleResponse_Failure{Failure: &proto.Failure{Message: "not text: \xff\xfe"}}}}}
	if err := s.Send(bad); err == nil {
		t.Fatal("Send of a message protobuf cannot encode succeeded")
	}
	if _, err := hostEnd.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the host's read after the plugin's failed send = %v, want io.EOF (the socket closed)", err)
	}
}

// A handler's error that quotes bytes that are not UTF-8 still reaches the
// host, as text: a protobuf string must be UTF-8.
func TestFailureMessageIsText(t *testing.T) {
	resp := responseToProto(1, nil, errors.New("cannot parse \xff\xfe"))
	if _, err := gproto.Marshal(resp); err != nil {
		t.Fatalf("the answer to a handler's error with bytes that are not UTF-8 does not encode: %v", err)
	}
	if got := resp.GetFailure().GetMessage(); got != "cannot parse \uFFFD" {
		t.Fatalf("failure message = %q, want the bytes replaced by U+FFFD", got)
	}
}
