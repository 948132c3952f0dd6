package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// Defaults for the zero values in Config.
const (
	DefaultTimeout      = 30 * time.Second
	DefaultStartTimeout = 20 * time.Second
)

// Restart backoff: the first restart after a plugin that ran for a while is
// immediate; each further crash of a plugin that did not stay up for
// healthyAfter doubles the delay, up to maxRestartDelay.
const (
	firstRestartDelay = 100 * time.Millisecond
	maxRestartDelay   = 30 * time.Second
	healthyAfter      = 30 * time.Second
	killGrace         = 3 * time.Second
)

// Config describes one plugin process.
type Config struct {
	// Name is the plugin's name in the flow file, used in logs and errors.
	Name string
	// Command is the executable's path, already resolved relative to the
	// flow file (a relative path is taken relative to Dir).
	Command string
	Args    []string
	// Env is added to the environment the process inherits from the
	// runtime. The inherited environment leaves out every variable whose
	// name starts with ACEMQ_ (the runtime's admin token, broker and store
	// URLs); Env passes whatever it names, ACEMQ_ variables included.
	Env map[string]string
	// Dir is the process's working directory (the flow file's folder); ""
	// means the runtime's.
	Dir string
	// SHA256 is the hex sha256 the executable must have; "" skips the check.
	SHA256 string
	// Timeout bounds each call, including any wait for a restart; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// StartTimeout bounds the wait for the plugin's handshake; 0 means
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// Logger receives the host's lifecycle records and the plugin's stderr,
	// tagged plugin=<Name>; nil discards them.
	Logger *slog.Logger

	// grpcCalls, for tests, offers the plugin no call socket: calls go
	// over the gRPC Calls stream, as with plugins that do not serve it.
	grpcCalls bool
}

// Request is one call of a handler: one message.
type Request struct {
	// Handler is the handler's name inside the plugin ("reserve" for
	// "stock.reserve").
	Handler string
	// Compensate is true when the call is a saga step's compensation
	// (undoing a completed step); StepOutput is then what that step's
	// handler returned, as the saga recorded it (nil when it returned
	// nothing). StepOutput is nil for every other call.
	Compensate bool
	Envelope   Envelope
	Payload    []byte
	StepOutput []byte
}

// Envelope is what the runtime knows about a message beside its payload
// (FLOW-FORMAT.md §2).
type Envelope struct {
	MessageID     string
	Type          string
	CorrelationID string
	CausationID   string
	Origin        string
	// Attempt is 1 on first delivery, +1 per trip through the retry ladder.
	Attempt   int
	FirstSeen time.Time
	Headers   map[string]string
	// Queue is the queue the message was consumed from ("" for a call
	// with no queue), ReceivedAt when the runtime received the delivery.
	Queue      string
	ReceivedAt time.Time
}

// Result is a handler's answer when it did not fail.
type Result struct {
	// Stop is true when the handler returned nothing: the run stops at
	// this step (or completes, if the step is the last).
	Stop bool
	// Payload is the output message's body when Stop is false.
	Payload []byte
}

// HandlerInfo is one handler a plugin serves, with the flow type names it
// declares ("" means any JSON value, "none" that it returns nothing).
type HandlerInfo struct {
	Name       string
	InputType  string
	OutputType string
}

// Plugin is a running plugin process, restarted when it crashes. All its
// methods are safe for concurrent use; Call is meant to be called by many
// goroutines at once, all multiplexed over one stream to the process.
type Plugin struct {
	cfg        Config
	log        *slog.Logger
	timeoutErr error
	grace      time.Duration // hangGrace(cfg.Timeout), each call's limit.grace
	spawn      func(ctx context.Context) (*instance, error)

	cur      atomic.Pointer[instance]
	restarts atomic.Int64

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever cur changes
	lastErr  error         // why no instance is running, while none is
	handlers []HandlerInfo

	closing   chan struct{}
	stopLife  context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Start starts the plugin process, verifies its checksum when cfg.SHA256
// is set, completes the go-plugin handshake (gRPC with automatic mutual
// TLS), checks its health and describes its handlers. It returns once the
// plugin is ready for calls; the caller must Close it. On error nothing is
// left running.
//
// A checksum mismatch is a *ChecksumError. ctx bounds the start only, not
// the plugin's life.
func Start(ctx context.Context, cfg Config) (*Plugin, error) {
	p, err := newPlugin(cfg)
	if err != nil {
		return nil, err
	}
	p.spawn = p.spawnProcess
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func newPlugin(cfg Config) (*Plugin, error) {
	if cfg.Name == "" {
		return nil, errors.New("plugin config has no name")
	}
	if cfg.Command == "" {
		return nil, fmt.Errorf("plugin %q: no command", cfg.Name)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Plugin{
		cfg:        cfg,
		log:        log.With("plugin", cfg.Name),
		timeoutErr: fmt.Errorf("%w (%s)", ErrTimeout, cfg.Timeout),
		grace:      hangGrace(cfg.Timeout),
		changed:    make(chan struct{}),
		closing:    make(chan struct{}),
	}, nil
}

func (p *Plugin) start(ctx context.Context) error {
	inst, err := p.spawn(ctx)
	if err != nil {
		return err
	}
	p.setCurrent(inst, nil)
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.stopLife = cancel
	p.wg.Go(func() { p.supervise(life, inst) })
	p.log.Info("plugin started", "pid", inst.pid, "handlers", len(inst.handlers), "calls", inst.calls)
	return nil
}

// Handlers returns the handlers the plugin described when it last started.
func (p *Plugin) Handlers() []HandlerInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.handlers)
}

// Describe asks the running plugin for its handlers, waiting for a restart
// if one is under way (within ctx and the per-call timeout).
func (p *Plugin) Describe(ctx context.Context) ([]HandlerInfo, error) {
	l, t := p.limit(ctx)
	defer releaseTimer(t)
	inst, err := p.running(l)
	if err != nil {
		return nil, fmt.Errorf("plugin %q: describe: %w", p.cfg.Name, err)
	}
	left, _ := l.left()
	ctx, cancel := context.WithTimeoutCause(ctx, left, p.timeoutErr)
	defer cancel()
	hs, err := inst.describe(ctx)
	if err != nil {
		return nil, fmt.Errorf("plugin %q: describe: %w", p.cfg.Name, err)
	}
	return hs, nil
}

// Call runs one handler on one message and returns its answer. The call is
// bounded by ctx and by the plugin's Timeout, which also covers waiting for
// a crashed plugin to restart.
//
// Errors: a failure the handler reported is a *CallError (IsFatal tells
// whether it is fatal); every other error (ErrCrashed, ErrHung, ErrTimeout,
// ErrUnavailable, ErrClosed, ErrProtocol, or the cause of ctx) is retryable.
func (p *Plugin) Call(ctx context.Context, req Request) (Result, error) {
	l, t := p.limit(ctx)
	defer releaseTimer(t)
	inst, err := p.running(l)
	if err != nil {
		return Result{}, fmt.Errorf("plugin %q handler %q: %w", p.cfg.Name, req.Handler, err)
	}
	resp, err := inst.call(l, req)
	if err != nil {
		return Result{}, fmt.Errorf("plugin %q handler %q: %w", p.cfg.Name, req.Handler, err)
	}
	return resultFromProto(p.cfg.Name, req.Handler, resp)
}

// limit starts the clock of one call on t, a timer that releaseTimer
// gives back once the call has ended.
func (p *Plugin) limit(ctx context.Context) (l limit, t *time.Timer) {
	if t, _ = callTimers.Get().(*time.Timer); t != nil {
		t.Reset(p.cfg.Timeout)
	} else {
		t = time.NewTimer(p.cfg.Timeout)
	}
	return limit{ctx: ctx, expire: t.C, deadline: time.Now().Add(p.cfg.Timeout), err: p.timeoutErr, grace: p.grace}, t
}

// callTimers keeps the timers of ended calls for the next ones, which
// then allocate none (a timer and its channel, three allocations). A
// stopped timer is as good as new: since Go 1.23 neither Stop nor Reset
// leaves a stale time to be received.
var callTimers sync.Pool

// releaseTimer stops the timer of a call that has ended and keeps it for
// another; nothing may read its channel after.
func releaseTimer(t *time.Timer) {
	t.Stop()
	callTimers.Put(t)
}

// Restarts returns how many times the plugin was restarted after a crash.
func (p *Plugin) Restarts() int64 { return p.restarts.Load() }

// Pid returns the running plugin process's id, or 0 while none is running
// (or when the plugin runs in process, in tests).
func (p *Plugin) Pid() int {
	if inst := p.cur.Load(); inst != nil && inst.alive() {
		return inst.pid
	}
	return 0
}

// Close stops the plugin: calls in flight fail with ErrClosed, the process
// is asked to exit, and after a grace period its whole process group is
// killed; Close waits until the process has exited. It is idempotent.
func (p *Plugin) Close() error {
	p.closeOnce.Do(func() {
		close(p.closing)
		if p.stopLife != nil {
			p.stopLife()
		}
		p.wg.Wait()
		if inst := p.cur.Swap(nil); inst != nil {
			p.closeErr = inst.stop(ErrClosed)
		}
		p.log.Info("plugin stopped")
	})
	return p.closeErr
}

// running returns the running instance, waiting for a restart if needed.
func (p *Plugin) running(l limit) (*instance, error) {
	for {
		if inst := p.cur.Load(); inst != nil && inst.alive() {
			return inst, nil
		}
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		if inst := p.cur.Load(); inst != nil && inst.alive() {
			return inst, nil
		}
		var cause error
		select {
		case <-p.closing:
			return nil, ErrClosed
		case <-changed:
			continue
		case <-l.ctx.Done():
			cause = context.Cause(l.ctx)
		case <-l.expire:
			cause = l.err
		}
		p.mu.Lock()
		last := p.lastErr // the latest reason, e.g. a failed restart
		p.mu.Unlock()
		if last == nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, cause)
		}
		return nil, fmt.Errorf("%w (%v): %w", ErrUnavailable, last, cause)
	}
}

func (p *Plugin) setCurrent(inst *instance, why error) {
	p.cur.Store(inst)
	p.mu.Lock()
	defer p.mu.Unlock()
	if inst != nil {
		p.handlers = inst.handlers
	}
	p.lastErr = why
	close(p.changed)
	p.changed = make(chan struct{})
}

// supervise restarts the plugin whenever its instance fails, until Close.
// Calls in flight on a failed instance fail as retryable; calls made while
// it restarts wait for the new instance within their timeout.
func (p *Plugin) supervise(life context.Context, inst *instance) {
	quickFailures := 0
	for {
		select {
		case <-inst.done:
		case <-p.closing:
			return
		}
		p.setCurrent(nil, inst.err)
		lived := time.Since(inst.started)
		if err := inst.stop(inst.err); err != nil {
			p.log.Error("plugin did not stop", "pid", inst.pid, "error", err)
		}
		p.log.Warn("plugin exited", "pid", inst.pid, "error", inst.err, "uptime", lived.Round(time.Millisecond))
		if lived >= healthyAfter {
			quickFailures = 0
		}
		for {
			delay := restartDelay(quickFailures)
			quickFailures++
			if delay > 0 {
				t := time.NewTimer(delay)
				select {
				case <-t.C:
				case <-p.closing:
					t.Stop()
					return
				}
			}
			next, err := p.spawn(life)
			if err != nil {
				if life.Err() != nil {
					return
				}
				p.mu.Lock()
				p.lastErr = err
				p.mu.Unlock()
				p.log.Error("plugin restart failed", "error", err, "next_attempt_in", restartDelay(quickFailures))
				continue
			}
			p.restarts.Add(1)
			if !slices.Equal(next.handlers, inst.handlers) {
				p.log.Warn("plugin handlers changed on restart", "before", inst.handlers, "after", next.handlers)
			}
			p.setCurrent(next, nil)
			p.log.Info("plugin restarted", "pid", next.pid, "restarts", p.restarts.Load())
			inst = next
			break
		}
	}
}

// restartDelay is the wait before restart attempt n+1 in a row of crashes
// that each came soon after a start.
func restartDelay(quickFailures int) time.Duration {
	if quickFailures == 0 {
		return 0
	}
	d := firstRestartDelay
	for range quickFailures - 1 {
		d *= 2
		if d >= maxRestartDelay {
			return maxRestartDelay
		}
	}
	return d
}

// dialOptions tune the connection to a plugin for many small messages in
// flight: fixed, large flow-control windows, so that the stream never
// stalls for window updates and gRPC sends no bandwidth-probing pings; and
// buffers that are not cleared on reuse (proto.Buffers). A message may be
// as large as the call socket's frame (proto.MaxFrame), not gRPC's default
// of 4 MiB, so that a plugin gets the whole payload either way
// (plugins/README.md, "Payload size"); go-plugin sets the same today, and
// this keeps it so whatever go-plugin does.
var dialOptions = []grpc.DialOption{
	grpc.WithInitialWindowSize(flowWindow),
	grpc.WithInitialConnWindowSize(flowWindow),
	grpc.WithDefaultCallOptions(grpc.ForceCodecV2(proto.Codec),
		grpc.MaxCallRecvMsgSize(proto.MaxFrame), grpc.MaxCallSendMsgSize(proto.MaxFrame)),
	experimental.WithBufferPool(proto.Buffers),
}

const flowWindow = 16 << 20

// handshake is the go-plugin handshake of acemq-flow plugins.
var handshake = plugin.HandshakeConfig{
	ProtocolVersion:  proto.ProtocolVersion,
	MagicCookieKey:   proto.MagicCookieKey,
	MagicCookieValue: proto.MagicCookieValue,
}

// spawnProcess starts one plugin process and opens an instance on it.
func (p *Plugin) spawnProcess(ctx context.Context) (*instance, error) {
	cfg := p.cfg
	if err := verifyChecksum(cfg); err != nil {
		return nil, err
	}
	var r atomic.Pointer[procRunner]
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  handshake,
		Plugins:          plugin.PluginSet{proto.PluginName: &grpcPlugin{}},
		RunnerFunc:       runnerFunc(cfg, &r),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     cfg.StartTimeout,
		Logger:           newHclogAdapter(p.log, filepath.Base(cfg.Command)),
		Stderr:           io.Discard,
		SyncStdout:       &lineWriter{log: p.log, stream: "stdout"},
		SyncStderr:       &lineWriter{log: p.log, stream: "stderr"},
		SkipHostEnv:      true, // newProcRunner adds the environment itself, flow env winning
		GRPCDialOptions:  dialOptions,
	})
	// A start that outlives ctx (Close during a restart) is cut short by
	// killing the process, which makes go-plugin's handshake wait return.
	stopWatch := context.AfterFunc(ctx, func() {
		if run := r.Load(); run != nil {
			_ = run.Kill(context.Background())
		}
	})
	began := time.Now()
	release := func(hung bool) error { return p.releaseProcess(client, r.Load(), hung) }
	fail := func(err error) (*instance, error) {
		stopWatch()
		_ = release(false)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("plugin %q: start %s: %w", cfg.Name, cfg.Command, context.Cause(ctx))
		}
		return nil, err
	}

	rpcClient, err := client.Client()
	if err != nil {
		return fail(p.startError(r.Load(), began, err))
	}
	raw, err := rpcClient.Dispense(proto.PluginName)
	if err != nil {
		return fail(fmt.Errorf("plugin %q: %w", cfg.Name, err))
	}
	run := r.Load()
	// A plugin that handshakes but then does not answer must not stall a
	// start or a restart forever.
	openCtx, cancelOpen := context.WithTimeout(ctx, cfg.StartTimeout)
	inst, err := openInstance(openCtx, cfg.Name, raw.(*grpc.ClientConn), run.takeCalls(), run.Pid(), run.exited,
		run.exitStatus, release)
	cancelOpen()
	if err != nil {
		return fail(fmt.Errorf("plugin %q (%s): %w", cfg.Name, cfg.Command, err))
	}
	if !stopWatch() {
		_ = inst.stop(ErrClosed)
		return nil, fmt.Errorf("plugin %q: start %s: %w", cfg.Name, cfg.Command, context.Cause(ctx))
	}
	return inst, nil
}

// startError explains a failed start from what is known of the process.
func (p *Plugin) startError(run *procRunner, began time.Time, err error) error {
	cfg := p.cfg
	if run == nil || run.Pid() == 0 {
		return fmt.Errorf("plugin %q: cannot run %s: %w", cfg.Name, cfg.Command, err)
	}
	if time.Since(began) >= cfg.StartTimeout {
		return fmt.Errorf("plugin %q: %s did not complete the go-plugin handshake within %s (start timeout); "+
			"an acemq-flow plugin prints its handshake line on stdout at once: is this binary built with plugins/sdk "+
			"(or does it follow plugins/README.md)?: %w", cfg.Name, cfg.Command, cfg.StartTimeout, err)
	}
	// The handshake failed early: most often the process exited. Its exit
	// status is the most useful thing to report, and comes a moment later.
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-run.exited:
		return fmt.Errorf("plugin %q: %s exited before completing the go-plugin handshake (%s); "+
			"run it by hand to see why, or check that it is an acemq-flow plugin: %w", cfg.Name, cfg.Command, run.exitStatus(), err)
	case <-t.C:
	}
	return fmt.Errorf("plugin %q: %s failed the go-plugin handshake: %w", cfg.Name, cfg.Command, err)
}

// releaseProcess stops a plugin process: go-plugin's graceful shutdown
// first, then SIGKILL to the whole process group after killGrace (go-plugin
// can hang on a plugin that does not answer), and waits for the exit. A
// hung plugin, which cannot answer a graceful shutdown either, gets the
// SIGKILL first: it is replaced at once instead of after killGrace and
// go-plugin's own wait.
func (p *Plugin) releaseProcess(client *plugin.Client, run *procRunner, hung bool) error {
	if run != nil {
		run.closeFiles()
		if run.socketDir != "" {
			// go-plugin leaves it behind when the process could not be run.
			defer os.RemoveAll(run.socketDir)
		}
	}
	if hung && run != nil && run.Pid() != 0 {
		p.log.Warn("plugin answers nothing; killing its process group", "pid", run.Pid())
		_ = run.Kill(context.Background())
	}
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		client.Kill()
	}()
	t := time.NewTimer(killGrace)
	defer t.Stop()
	select {
	case <-killed:
	case <-t.C:
		p.log.Warn("plugin did not stop in time; killing its process group", "grace", killGrace)
	}
	if run == nil || run.Pid() == 0 {
		<-killed // nothing was started, so go-plugin has nothing to wait for
		return nil
	}
	// Also after a clean exit: children the plugin started die with it.
	_ = run.Kill(context.Background())
	t.Reset(killGrace)
	select {
	case <-killed:
	case <-t.C:
		return fmt.Errorf("plugin %q: process %d did not exit after SIGKILL", p.cfg.Name, run.Pid())
	}
	select {
	case <-run.exited:
		return nil
	case <-t.C:
		return fmt.Errorf("plugin %q: process %d was not reaped", p.cfg.Name, run.Pid())
	}
}

// verifyChecksum refuses an executable whose sha256 differs from
// cfg.SHA256, through go-plugin's SecureConfig. The check and the exec are
// two steps: keep plugin binaries where the runtime's user cannot write
// them (plugins/README.md).
func verifyChecksum(cfg Config) error {
	if cfg.SHA256 == "" {
		return nil
	}
	want, err := hex.DecodeString(strings.TrimSpace(cfg.SHA256))
	if err != nil || len(want) != sha256.Size {
		return fmt.Errorf("plugin %q: sha256 %q is not 64 hexadecimal digits; write the output of `sha256sum %s`",
			cfg.Name, cfg.SHA256, cfg.Command)
	}
	path := executablePath(cfg)
	ok, err := (&plugin.SecureConfig{Checksum: want, Hash: sha256.New()}).Check(path)
	if err != nil {
		return fmt.Errorf("plugin %q: cannot verify sha256 of %s: %w", cfg.Name, path, err)
	}
	if ok {
		return nil
	}
	actual, err := fileSHA256(path)
	if err != nil {
		return fmt.Errorf("plugin %q: cannot verify sha256 of %s: %w", cfg.Name, path, err)
	}
	return &ChecksumError{Plugin: cfg.Name, Path: path, Expected: strings.ToLower(cfg.SHA256), Actual: actual}
}

// executablePath is the file exec will run for cfg.
func executablePath(cfg Config) string {
	c := cfg.Command
	switch {
	case filepath.IsAbs(c):
		return c
	case strings.ContainsRune(c, filepath.Separator):
		if cfg.Dir != "" {
			return filepath.Join(cfg.Dir, c)
		}
		return c
	}
	if lp, err := exec.LookPath(c); err == nil {
		return lp
	}
	return c
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// grpcPlugin is the go-plugin side of the Plugin service: the host
// dispenses the raw connection; server, set only by in-process tests, is
// registered when serving.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	server proto.PluginServer
}

func (g *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if g.server == nil {
		return errors.New("the host side of the plugin protocol does not serve")
	}
	proto.RegisterPluginServer(s, g.server)
	return nil
}

func (g *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return conn, nil
}
