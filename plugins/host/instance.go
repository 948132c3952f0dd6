package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// Limits on one CallBatch: calls that are queued together travel together,
// but the sender never waits to fill a batch, and a call that would take a
// batch past maxBatchBytes starts the next (a large one travels alone).
const (
	maxBatchCalls = 256
	maxBatchBytes = 1 << 20
)

// instance is one running plugin process (or in-process server) and the
// call stream multiplexed over its connection. It fails once, for good:
// the Plugin replaces a failed instance with a new one.
type instance struct {
	plugin string
	rpc    proto.PluginClient
	stream callStream
	cancel func() // ends the stream
	// calls says which transport the call stream uses: "socket" (the
	// call socket) or "grpc" (the Calls stream).
	calls    string
	started  time.Time
	handlers []HandlerInfo
	pid      int // 0 in process

	// release stops what the instance runs on (kills and waits for the
	// process, or closes an in-process connection); called once by stop,
	// hung when the instance failed for answering nothing (ErrHung).
	release func(hung bool) error

	nextID atomic.Uint64
	// answered is when the last ResultBatch arrived, as time since
	// started (monotonic); 0 before the first. A call that times out
	// compares it with when it was sent to tell a slow handler from a
	// plugin that answers nothing (see watchHang).
	answered atomic.Int64

	mu      sync.Mutex
	pending map[uint64]chan *proto.HandleResponse
	failed  bool

	done chan struct{} // closed by fail
	err  error         // why; set before done is closed

	smu     sync.Mutex // guards the send queue; see send
	squeue  []outgoing
	sspare  []outgoing
	sending bool
	sendErr error
	// stall fails the instance when a write does not return within
	// stallAfter: the caller that writes holds no select on its limit, so
	// a stream stuck in flow control (a stopped plugin) would hold it.
	stall      *time.Timer
	stallAfter atomic.Int64 // a time.Duration

	loops    sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

type outgoing struct {
	call   *proto.HandleRequest // a new call, or
	cancel uint64               // a call the host no longer waits for
}

// callStream is the call stream as the instance uses it: the gRPC Calls
// stream, or the same messages framed on the call socket.
type callStream interface {
	Send(*proto.CallBatch) error
	Recv() (*proto.ResultBatch, error)
}

// socketStream is the call stream on the call socket (proto.Frames).
type socketStream struct{ f *proto.Frames }

func (s socketStream) Send(b *proto.CallBatch) error { return s.f.Write(b) }

func (s socketStream) Recv() (*proto.ResultBatch, error) {
	b := &proto.ResultBatch{}
	if err := s.f.Read(b); err != nil {
		return nil, err
	}
	return b, nil
}

// openCallSocket returns the call socket on calls, the host's end of the
// socket pair whose other end the plugin inherited, when the plugin serves
// calls on it: a plugin that does writes one empty ResultBatch there before
// it prints its handshake line, so the frame is waiting by the time the
// plugin has answered Describe (see callSocketHello). Otherwise it closes
// calls and returns nil, and calls go over gRPC.
func openCallSocket(calls *os.File) *proto.Frames {
	if calls == nil {
		return nil
	}
	defer calls.Close() // the connection holds a duplicate
	if !callSocketHello(calls) {
		return nil
	}
	conn, err := net.FileConn(calls)
	if err != nil {
		return nil
	}
	return proto.NewFrames(conn)
}

// openInstance checks the plugin's health, describes it and opens the call
// stream: on calls, the host's end of the call socket, when the plugin
// serves calls there (see openCallSocket), else over conn. openInstance
// takes calls, which may be nil. exited, when not nil, is closed when the
// process exits; exitStatus then says how. On error, the caller still owns
// release.
func openInstance(ctx context.Context, name string, conn grpc.ClientConnInterface, calls *os.File, pid int,
	exited <-chan struct{}, exitStatus func() string, release func(hung bool) error) (*instance, error) {
	health, err := grpc_health_v1.NewHealthClient(conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: "plugin"})
	if err != nil {
		closeFile(calls)
		return nil, fmt.Errorf("health check: %w", err)
	}
	if s := health.GetStatus(); s != grpc_health_v1.HealthCheckResponse_SERVING {
		closeFile(calls)
		return nil, fmt.Errorf("health check: service %q reports %s, want SERVING", "plugin", s)
	}
	rpc := proto.NewPluginClient(conn)
	desc, err := rpc.Describe(ctx, &proto.DescribeRequest{})
	if err != nil {
		closeFile(calls)
		return nil, fmt.Errorf("describe: %w", err)
	}
	var (
		stream    callStream
		cancel    func()
		transport = "socket"
	)
	if f := openCallSocket(calls); f != nil {
		stream, cancel = socketStream{f}, func() { _ = f.Close() }
	} else {
		transport = "grpc"
		// The stream lives as long as the instance, not as long as ctx
		// (the caller of Start, or one restart attempt).
		streamCtx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
		if stream, err = rpc.Calls(streamCtx); err != nil {
			cancelStream()
			return nil, fmt.Errorf("open call stream: %w", err)
		}
		cancel = cancelStream
	}
	i := &instance{
		plugin:   name,
		rpc:      rpc,
		stream:   stream,
		cancel:   cancel,
		calls:    transport,
		started:  time.Now(),
		handlers: handlersFromProto(desc),
		pid:      pid,
		release:  release,
		pending:  make(map[uint64]chan *proto.HandleResponse),
		done:     make(chan struct{}),
	}
	i.stall = time.AfterFunc(time.Hour, func() {
		i.fail(fmt.Errorf("%w (a write of calls to it did not complete within %s; it is restarted)",
			ErrHung, time.Duration(i.stallAfter.Load())))
	})
	i.stall.Stop()
	i.loops.Go(i.recvLoop)
	if exited != nil {
		i.loops.Go(func() {
			select {
			case <-exited:
				i.fail(fmt.Errorf("%w (%s)", ErrCrashed, exitStatus()))
			case <-i.done:
			}
		})
	}
	return i, nil
}

// fail marks the instance failed with err (the first error wins) and
// releases every caller waiting on it.
func (i *instance) fail(err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.failed {
		return
	}
	i.failed = true
	i.err = err
	clear(i.pending)
	close(i.done)
	i.cancel()
}

func (i *instance) alive() bool {
	select {
	case <-i.done:
		return false
	default:
		return true
	}
}

// stop fails the instance (if it has not failed yet), ends its stream,
// waits for its goroutines and releases the process. It is idempotent.
func (i *instance) stop(reason error) error {
	i.stopOnce.Do(func() {
		i.fail(reason)
		i.loops.Wait()
		if i.release != nil {
			i.stopErr = i.release(errors.Is(reason, ErrHung))
		}
	})
	return i.stopErr
}

// limit is how long one call may take: until the caller's context ends or
// the plugin's timeout fires, whichever comes first. It is a timer rather
// than a context derived per call, because deriving from a context that
// many callers share makes them all take its lock twice per call.
type limit struct {
	ctx    context.Context
	expire <-chan time.Time // the plugin's per-call timeout
	// deadline is when expire fires. A timer's channel becomes ready only
	// once the runtime runs the timer, which a busy machine delays: a check
	// of the time is exact.
	deadline time.Time
	err      error // what expire means
	// grace is how long after a call's limit the host still waits for
	// any answer from the plugin before taking it for hung: a handler
	// that returns at its own deadline gets its answer in meanwhile.
	grace time.Duration
}

// left is the time the call has now: until its limit or its caller's
// deadline, whichever comes first. Computed when it is sent, not when the
// call began: a call that waited for a plugin to restart has less, and a
// plugin told it had the whole timeout would take longer than the host
// waits for it, and be taken for hung.
func (l limit) left() (time.Duration, error) {
	d, err := time.Until(l.deadline), l.err
	if cd, ok := l.ctx.Deadline(); ok && time.Until(cd) < d {
		d, err = time.Until(cd), context.DeadlineExceeded
	}
	return d, err
}

// hangGrace is limit.grace for a plugin with the given per-call timeout.
func hangGrace(timeout time.Duration) time.Duration {
	return max(timeout/2, 500*time.Millisecond)
}

// call sends one request and waits for its answer, the limit or the
// instance's failure. The errors it returns are all retryable.
func (i *instance) call(l limit, req Request) (*proto.HandleResponse, error) {
	// A call with no time left is not sent: the plugin would run it for
	// nobody (or, with timeout_ms 0, without a limit).
	if l.ctx.Err() != nil {
		return nil, context.Cause(l.ctx)
	}
	left, lerr := l.left()
	if left <= 0 {
		return nil, lerr
	}
	id := i.nextID.Add(1)
	ch := answerChans.Get().(chan *proto.HandleResponse)
	i.mu.Lock()
	if i.failed {
		i.mu.Unlock()
		return nil, i.err
	}
	i.pending[id] = ch
	i.mu.Unlock()

	sent := time.Since(i.started)
	call := requestToProto(id, req, left)
	call.TraceContext = traceContext(l.ctx)
	if err := i.send(outgoing{call: call}, left+l.grace); err != nil {
		i.forget(id)
		return nil, err
	}
	var cause error
	select {
	case resp := <-ch:
		// recvLoop took the call off pending before it sent: nothing
		// more comes on ch, which is empty again.
		answerChans.Put(ch)
		return l.answered(resp)
	case <-l.ctx.Done():
		cause = context.Cause(l.ctx)
	case <-l.expire:
		cause = l.err
		i.watchHang(sent, l.grace)
	case <-i.done:
		select {
		case resp := <-ch:
			return l.answered(resp)
		default:
		}
		return nil, i.err
	}
	if i.forget(id) {
		// Tell the plugin to cancel the handler's context (it also has its
		// own copy of the deadline).
		_ = i.send(outgoing{cancel: id}, l.grace)
	}
	select {
	case resp := <-ch: // answered while the limit passed: use it
		return l.answered(resp)
	default:
	}
	return nil, cause
}

// answerChans keeps the answer channels of calls that were answered for
// the next calls (each a buffer of one, for recvLoop to send on without
// waiting). Only an answered call gives its channel back: one that ended
// otherwise leaves it to the garbage collector.
var answerChans = sync.Pool{New: func() any { return make(chan *proto.HandleResponse, 1) }}

// answered is the outcome of a call that got resp. A failure answered once
// the limit or the caller's deadline has passed is the handler stopped by
// that deadline (the plugin applies the same one): it is the timeout,
// whichever of the two the host happened to see first.
func (l limit) answered(resp *proto.HandleResponse) (*proto.HandleResponse, error) {
	if resp.GetFailure() != nil {
		if !time.Now().Before(l.deadline) {
			return nil, l.err
		}
		if l.ctx.Err() != nil {
			return nil, context.Cause(l.ctx)
		}
		if d, ok := l.ctx.Deadline(); ok && !time.Now().Before(d) {
			return nil, context.DeadlineExceeded
		}
	}
	return resp, nil
}

// forget removes a pending call and reports whether it was still pending.
func (i *instance) forget(id uint64) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	_, ok := i.pending[id]
	delete(i.pending, id)
	return ok
}

// watchHang is called when a call sent at sent (time since started) has
// timed out. Unless the plugin answered anything since, it checks again
// after grace and, if the plugin has still answered nothing since sent,
// fails the instance so that it is restarted. A slow handler alone does
// not: other calls' answers (or its own, at its deadline) prove the plugin
// alive.
func (i *instance) watchHang(sent, grace time.Duration) {
	if i.answered.Load() >= int64(sent) || !i.alive() {
		return
	}
	time.AfterFunc(grace, func() {
		if i.answered.Load() >= int64(sent) {
			return
		}
		silent := (time.Since(i.started) - sent).Round(time.Millisecond)
		i.fail(fmt.Errorf("%w (it answered nothing for %s after a call timed out; it is restarted)", ErrHung, silent))
	})
}

func (i *instance) recvLoop() {
	for {
		batch, err := i.stream.Recv()
		if err != nil {
			i.fail(fmt.Errorf("%w (connection lost: %v)", ErrCrashed, err))
			return
		}
		i.answered.Store(int64(time.Since(i.started)))
		i.mu.Lock()
		for _, r := range batch.GetResults() {
			if ch, ok := i.pending[r.GetCallId()]; ok {
				delete(i.pending, r.GetCallId())
				ch <- r // buffered, and only this loop sends on it
			}
		}
		i.mu.Unlock()
	}
}

// send queues o for the stream. The sender batches without a goroutine of
// its own: a caller that finds no write under way writes, and goes on
// writing what other callers queued meanwhile; one that comes during a
// write only queues. Under load, calls thus share writes (and the wake-ups
// and system calls that go with them); at low load a call is written at
// once. It returns the instance's error once it has failed.
//
// stallAfter bounds how long this caller may spend writing (its own limit
// plus the hang grace): a write that takes longer fails the instance,
// which ends the stream and so the write.
func (i *instance) send(o outgoing, stallAfter time.Duration) error {
	i.smu.Lock()
	if i.sendErr != nil {
		err := i.sendErr
		i.smu.Unlock()
		return err
	}
	i.squeue = append(i.squeue, o)
	if i.sending {
		i.smu.Unlock()
		return nil
	}
	i.sending = true
	i.smu.Unlock()
	// Callers woken by the same batch of answers are often about to call
	// again: let them queue their calls for this write.
	runtime.Gosched()
	i.smu.Lock()
	for len(i.squeue) > 0 && i.sendErr == nil {
		queue := i.squeue
		i.squeue = i.sspare[:0]
		i.smu.Unlock()
		i.stallAfter.Store(int64(stallAfter))
		i.stall.Reset(stallAfter)
		err := i.write(queue)
		i.stall.Stop()
		clear(queue)
		i.smu.Lock()
		i.sspare = queue[:0]
		if err != nil {
			i.sendErr = fmt.Errorf("%w (connection lost: %v)", ErrCrashed, err)
			i.squeue = nil
		}
	}
	i.sending = false
	err := i.sendErr
	i.smu.Unlock()
	if err != nil {
		i.fail(err)
		<-i.done
		return i.err // the first reason, e.g. a stalled write, not its effect
	}
	return nil
}

// write sends queue in CallBatch messages of bounded size.
func (i *instance) write(queue []outgoing) error {
	batch := &proto.CallBatch{}
	for len(queue) > 0 {
		n, size := 0, 0
		batch.Calls, batch.Cancel = batch.Calls[:0], batch.Cancel[:0]
		for n < len(queue) && n < maxBatchCalls && (n == 0 || size+queue[n].size() <= maxBatchBytes) {
			size += queue[n].size()
			addOutgoing(batch, queue[n])
			n++
		}
		if err := i.stream.Send(batch); err != nil {
			return err
		}
		queue = queue[n:]
	}
	return nil
}

// describe asks the running plugin for its handlers.
func (i *instance) describe(ctx context.Context) ([]HandlerInfo, error) {
	desc, err := i.rpc.Describe(ctx, &proto.DescribeRequest{})
	if err != nil {
		if !i.alive() {
			return nil, i.err
		}
		return nil, err
	}
	return handlersFromProto(desc), nil
}

// addOutgoing adds o to batch.
func addOutgoing(batch *proto.CallBatch, o outgoing) {
	if o.call == nil {
		batch.Cancel = append(batch.Cancel, o.cancel)
		return
	}
	batch.Calls = append(batch.Calls, o.call)
}

// size is roughly how many bytes o adds to a batch.
func (o outgoing) size() int {
	if o.call == nil {
		return 8
	}
	return len(o.call.GetPayload()) + 128
}
