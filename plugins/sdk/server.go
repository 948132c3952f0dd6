package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// Limits on one ResultBatch: answers that are ready together travel
// together, but a batch never waits for more, and an answer that would take
// a batch past maxBatchBytes starts the next (a large one travels alone).
const (
	maxBatchResults = 256
	maxBatchBytes   = 1 << 20
)

// NewServer returns the gRPC service that Serve registers for handlers. It
// is exported for tests that run a plugin's handlers in process against
// the host; a plugin's main calls Serve instead. It fails when a handler
// has an empty name or no function.
func NewServer(handlers map[string]Handler) (proto.PluginServer, error) {
	s := &server{handlers: make(map[string]Handler, len(handlers))}
	var problems []string
	for name, h := range handlers {
		switch {
		case name == "" || strings.ContainsAny(name, ". \t\n"):
			problems = append(problems, fmt.Sprintf("handler name %q must be non-empty, without dots or spaces", name))
		case h.Func == nil:
			problems = append(problems, fmt.Sprintf("handler %q has no Func", name))
		default:
			s.handlers[name] = h
			s.names = append(s.names, name)
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return nil, errors.New(strings.Join(problems, "; "))
	}
	slices.Sort(s.names)
	return s, nil
}

type server struct {
	proto.UnimplementedPluginServer
	handlers map[string]Handler
	names    []string // sorted
}

func (s *server) Describe(context.Context, *proto.DescribeRequest) (*proto.DescribeResponse, error) {
	resp := &proto.DescribeResponse{}
	for _, name := range s.names {
		h := s.handlers[name]
		resp.Handlers = append(resp.Handlers, &proto.HandlerInfo{
			Name: name, InputType: h.InputType, OutputType: h.OutputType,
		})
	}
	return resp, nil
}

// Calls serves the host's call stream over gRPC (see serveCalls).
func (s *server) Calls(stream proto.Plugin_CallsServer) error {
	return s.serveCalls(stream.Context(), stream)
}

// callStream is the call stream as the server uses it: the gRPC Calls
// stream, or the same messages framed on the call socket.
type callStream interface {
	Recv() (*proto.CallBatch, error)
	Send(*proto.ResultBatch) error
}

// socketStream is the call stream on the call socket (proto.Frames).
type socketStream struct{ f *proto.Frames }

// Send writes b. Any failure closes the socket, also one that wrote
// nothing (a message too large): the host then sees the plugin gone and
// restarts it, rather than waiting for answers that are never sent.
func (s socketStream) Send(b *proto.ResultBatch) error {
	if err := s.f.Write(b); err != nil {
		s.f.Close()
		return err
	}
	return nil
}

func (s socketStream) Recv() (*proto.CallBatch, error) {
	b := &proto.CallBatch{}
	if err := s.f.Read(b); err != nil {
		return nil, err
	}
	return b, nil
}

// serveSocket serves calls on the call socket the host passed (see
// proto.CallsFDEnv) until the host closes it. It first writes the empty
// ResultBatch that tells the host the socket is served; when even that
// fails it closes the socket, and the host calls over gRPC.
func (s *server) serveSocket(f *proto.Frames) error {
	if err := f.Write(&proto.ResultBatch{}); err != nil {
		f.Close()
		return err
	}
	go func() {
		defer f.Close()
		if err := s.serveCalls(context.Background(), socketStream{f}); err != nil {
			fmt.Fprintf(stderr, "acemq-flow plugin: call socket: %v\n", err)
		}
	}()
	return nil
}

// serveCalls serves one call stream: each HandleRequest runs in its own
// goroutine, and answers go back in batches as they are ready. It returns
// when the host closes the stream; handlers still running then have their
// contexts cancelled and are waited for. ctx gives the calls' values.
func (s *server) serveCalls(ctx context.Context, stream callStream) error {
	// Each call's context is cancelled through running, not through a
	// common parent: deriving every call from one context would make all
	// handlers take that context's lock as they start and finish.
	base := context.WithoutCancel(ctx)
	var (
		mu      sync.Mutex
		running = map[uint64]context.CancelFunc{}
		ended   bool // the stream is gone: cancel calls as they start
	)
	cancelAll := func() {
		mu.Lock()
		defer mu.Unlock()
		ended = true
		for _, c := range running {
			c()
		}
	}
	out := &resultSender{stream: stream, onError: cancelAll} // the host is gone
	var handlers sync.WaitGroup
	var recvErr error
	for {
		batch, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				recvErr = err
			}
			break
		}
		for _, call := range batch.GetCalls() {
			callCtx, callCancel := s.callContext(base, call)
			id := call.GetCallId()
			mu.Lock()
			running[id] = callCancel
			if ended {
				callCancel()
			}
			mu.Unlock()
			handlers.Go(func() {
				resp := s.handle(callCtx, call)
				mu.Lock()
				delete(running, id)
				mu.Unlock()
				callCancel()
				out.send(resp)
			})
		}
		// Cancels after the batch's calls: the host may send a call and
		// its cancel in the same batch.
		mu.Lock()
		for _, id := range batch.GetCancel() {
			if c, ok := running[id]; ok {
				c()
			}
		}
		mu.Unlock()
	}
	cancelAll()
	handlers.Wait()
	if recvErr != nil {
		return recvErr
	}
	return out.error()
}

func (s *server) callContext(ctx context.Context, call *proto.HandleRequest) (context.Context, context.CancelFunc) {
	if ms := call.GetTimeoutMs(); ms > 0 {
		return context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	}
	return context.WithCancel(ctx)
}

// resultSender writes answers to the stream in batches without a goroutine
// of its own: a handler that finishes while no write is under way writes,
// and goes on writing what other handlers queued meanwhile; one that
// finishes during a write only queues its answer. Under load, answers thus
// share writes (and the wake-ups and system calls that go with them), and
// at low load an answer is written at once.
type resultSender struct {
	stream  callStream
	onError func()

	mu      sync.Mutex
	queue   []*proto.HandleResponse
	spare   []*proto.HandleResponse
	sending bool
	err     error
}

func (r *resultSender) send(resp *proto.HandleResponse) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return
	}
	r.queue = append(r.queue, resp)
	if r.sending {
		r.mu.Unlock()
		return
	}
	r.sending = true
	r.mu.Unlock()
	// Handlers started from the same batch of calls are often about to
	// finish: let them queue their answers for this write.
	runtime.Gosched()
	r.mu.Lock()
	for len(r.queue) > 0 && r.err == nil {
		batch := r.queue
		r.queue = r.spare[:0]
		r.mu.Unlock()
		err := r.write(batch)
		clear(batch)
		r.mu.Lock()
		r.spare = batch[:0]
		if err != nil {
			r.err = err
			r.queue = nil
			r.onError()
		}
	}
	r.sending = false
	r.mu.Unlock()
}

// write sends results in ResultBatch messages of bounded size.
func (r *resultSender) write(results []*proto.HandleResponse) error {
	for len(results) > 0 {
		n, size := 0, 0
		for n < len(results) && n < maxBatchResults && (n == 0 || size+resultSize(results[n]) <= maxBatchBytes) {
			size += resultSize(results[n])
			n++
		}
		if err := r.stream.Send(&proto.ResultBatch{Results: results[:n]}); err != nil {
			return err
		}
		results = results[n:]
	}
	return nil
}

// resultSize is roughly how many bytes an answer adds to a ResultBatch.
func resultSize(r *proto.HandleResponse) int {
	return len(r.GetOutput().GetPayload()) + len(r.GetFailure().GetMessage()) + 16
}

func (r *resultSender) error() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// handle runs one handler call and turns its outcome into the answer. A
// panic in the handler is a retryable failure of that call, not the end of
// the process: the other calls in flight keep running.
func (s *server) handle(ctx context.Context, call *proto.HandleRequest) (resp *proto.HandleResponse) {
	h, ok := s.handlers[call.GetHandler()]
	if !ok {
		err := Fatal(fmt.Errorf("this plugin has no handler %q; it serves: %s",
			call.GetHandler(), strings.Join(s.names, ", ")))
		return responseToProto(call.GetCallId(), nil, err)
	}
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(stderr, "handler %q panicked: %v\n%s", call.GetHandler(), v, debug.Stack())
			resp = responseToProto(call.GetCallId(), nil, fmt.Errorf("handler %q panicked: %v", call.GetHandler(), v))
		}
	}()
	if tc := call.GetTraceContext(); len(tc) > 0 {
		// The host's span for the call: the handler's spans are its
		// children, in the message's trace.
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(tc))
	}
	res, err := h.Func(ctx, requestFromProto(call))
	return responseToProto(call.GetCallId(), res, err)
}

// stderr is the process's standard error as it was before go-plugin
// redirected os.Stderr; lines written here reach the host's log.
var stderr io.Writer = os.Stderr
