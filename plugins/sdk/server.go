package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// Limits on one ResultBatch: answers that are ready together travel
// together, but a batch never waits for more.
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

// Calls serves the host's call stream: each HandleRequest runs in its own
// goroutine, and answers go back in batches as they are ready. It returns
// when the host closes the stream; handlers still running then have their
// contexts cancelled and are waited for.
func (s *server) Calls(stream proto.Plugin_CallsServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()

	results := make(chan *proto.HandleResponse, maxBatchResults)
	var sender sync.WaitGroup
	var sendErr error
	sender.Go(func() {
		sendErr = s.send(stream, results)
		if sendErr != nil {
			cancel() // the host is gone; stop the handlers
			for range results {
			}
		}
	})

	var (
		mu      sync.Mutex
		running = map[uint64]context.CancelFunc{}
	)
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
		mu.Lock()
		for _, id := range batch.GetCancel() {
			if c, ok := running[id]; ok {
				c()
			}
		}
		mu.Unlock()
		for _, call := range batch.GetCalls() {
			callCtx, callCancel := s.callContext(ctx, call)
			id := call.GetCallId()
			mu.Lock()
			running[id] = callCancel
			mu.Unlock()
			handlers.Go(func() {
				resp := s.handle(callCtx, call)
				mu.Lock()
				delete(running, id)
				mu.Unlock()
				callCancel()
				select {
				case results <- resp:
				case <-ctx.Done():
				}
			})
		}
	}
	cancel()
	handlers.Wait()
	close(results)
	sender.Wait()
	if recvErr != nil {
		return recvErr
	}
	return sendErr
}

func (s *server) callContext(ctx context.Context, call *proto.HandleRequest) (context.Context, context.CancelFunc) {
	if ms := call.GetTimeoutMs(); ms > 0 {
		return context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	}
	return context.WithCancel(ctx)
}

// send writes answers as they become ready, batching those that are
// already waiting so that a busy plugin makes fewer, larger writes.
func (s *server) send(stream proto.Plugin_CallsServer, results <-chan *proto.HandleResponse) error {
	batch := &proto.ResultBatch{}
	for first := range results {
		batch.Results = append(batch.Results[:0], first)
		size := gproto.Size(first)
	fill:
		for len(batch.Results) < maxBatchResults && size < maxBatchBytes {
			select {
			case r, ok := <-results:
				if !ok {
					break fill
				}
				batch.Results = append(batch.Results, r)
				size += gproto.Size(r)
			default:
				break fill
			}
		}
		if err := stream.Send(batch); err != nil {
			return err
		}
		clear(batch.Results)
	}
	return nil
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
	res, err := h.Func(ctx, requestFromProto(call))
	return responseToProto(call.GetCallId(), res, err)
}

// stderr is the process's standard error as it was before go-plugin
// redirected os.Stderr; lines written here reach the host's log.
var stderr io.Writer = os.Stderr
