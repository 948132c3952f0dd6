package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin/runner"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// procRunner is the go-plugin runner for a plugin process. The host uses
// its own runner rather than go-plugin's so that it owns the child: it
// starts it in its own process group with a parent-death signal (no orphan
// when the runtime is killed with SIGKILL), kills the whole group, and knows
// when the process has exited.
type procRunner struct {
	cfg    Config
	cmd    *exec.Cmd
	stdout io.ReadCloser
	stderr io.ReadCloser

	mu  sync.Mutex
	pid int

	exited  chan struct{} // closed once the process has been waited for
	waitErr error         // set before exited is closed

	socketDir string // go-plugin's folder for the plugin's socket; removed on release

	// verified is the executable whose sha256 was checked, open until the
	// process starts (nil without a sha256).
	verified *os.File
	// calls is the host's end of the call socket (nil where there is none)
	// until openInstance takes it; callsChild the plugin's end, open until
	// the process starts.
	calls, callsChild *os.File
}

var _ runner.Runner = (*procRunner)(nil)

// newProcRunner builds the command for cfg. base carries the environment
// go-plugin prepared (magic cookie, mTLS certificate, socket directory),
// which is applied last so a flow's env cannot override it.
func newProcRunner(cfg Config, base *exec.Cmd) (*procRunner, error) {
	cmd := exec.Command(cfg.Command, cfg.Args...)
	cmd.Dir = cfg.Dir
	var verified *os.File
	if cfg.SHA256 != "" {
		f, err := openVerified(cfg)
		if err != nil {
			return nil, err
		}
		verified = f
		if path, ok := execByDescriptor(f); ok {
			// The process runs the very file whose bytes were hashed: one
			// swapped in at the path since then is not looked at.
			cmd.Path, cmd.Err = path, nil
			cmd.ExtraFiles = []*os.File{f}
		}
	}
	env := inheritedEnv(os.Environ())
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		env = append(env, k+"="+cfg.Env[k])
	}
	env = append(env, base.Env...)
	var calls, callsChild *os.File
	var err error
	if !cfg.grpcCalls {
		calls, callsChild, err = callSocketPair()
	}
	if err != nil {
		closeFile(verified)
		return nil, fmt.Errorf("plugin %q: %w", cfg.Name, err)
	}
	r := &procRunner{cfg: cfg, cmd: cmd, verified: verified, calls: calls, callsChild: callsChild, exited: make(chan struct{})}
	if callsChild != nil {
		// The plugin's end is descriptor 3 + its index among the extra
		// files; the variable comes last so that no flow env replaces it.
		cmd.ExtraFiles = append(cmd.ExtraFiles, callsChild)
		env = append(env, fmt.Sprintf("%s=%d", proto.CallsFDEnv, 2+len(cmd.ExtraFiles)))
	}
	cmd.Env = env
	cmd.SysProcAttr = childProcAttr()
	if r.stdout, err = cmd.StdoutPipe(); err == nil {
		r.stderr, err = cmd.StderrPipe()
	}
	if err != nil {
		r.closeFiles()
		return nil, err
	}
	return r, nil
}

// closeFiles closes the descriptors the runner still holds.
func (r *procRunner) closeFiles() {
	closeFile(r.verified)
	closeFile(r.callsChild)
	closeFile(r.takeCalls())
	r.verified, r.callsChild = nil, nil
}

// takeCalls hands over the host's end of the call socket, once.
func (r *procRunner) takeCalls() *os.File {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.calls
	r.calls = nil
	return f
}

func closeFile(f *os.File) {
	if f != nil {
		_ = f.Close()
	}
}

// openVerified opens the file cfg runs and checks its sha256 on the open
// file; the file stays open, at its start.
func openVerified(cfg Config) (*os.File, error) {
	path := executablePath(cfg)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("plugin %q: cannot verify sha256 of %s: %w", cfg.Name, path, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("plugin %q: cannot verify sha256 of %s: %w", cfg.Name, path, err)
	}
	if actual := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(actual, strings.TrimSpace(cfg.SHA256)) {
		f.Close()
		return nil, &ChecksumError{Plugin: cfg.Name, Path: path, Expected: strings.ToLower(cfg.SHA256), Actual: actual}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("plugin %q: cannot verify sha256 of %s: %w", cfg.Name, path, err)
	}
	return f, nil
}

// inheritedEnv is the part of the runtime's environment a plugin inherits:
// all but the ACEMQ_ variables, which hold the runtime's own secrets (admin
// token, broker and store URLs with passwords). A flow's env: still passes
// any variable it names.
func inheritedEnv(environ []string) []string {
	return slices.DeleteFunc(environ, func(kv string) bool { return strings.HasPrefix(kv, "ACEMQ_") })
}

func (r *procRunner) Start(context.Context) error {
	err := r.cmd.Start()
	// The child has its own copies of these descriptors.
	closeFile(r.verified)
	closeFile(r.callsChild)
	r.verified, r.callsChild = nil, nil
	if err != nil {
		closeFile(r.takeCalls())
		return err
	}
	r.mu.Lock()
	r.pid = r.cmd.Process.Pid
	r.mu.Unlock()
	return nil
}

// Wait is called once by go-plugin, after the plugin's stdout and stderr
// reached EOF.
func (r *procRunner) Wait(context.Context) error {
	err := r.cmd.Wait()
	r.waitErr = err
	close(r.exited)
	return err
}

// Kill sends SIGKILL to the plugin's process group (its children too). It
// is safe to call at any time and more than once.
func (r *procRunner) Kill(context.Context) error {
	pid := r.Pid()
	if pid == 0 {
		return nil
	}
	return killGroup(pid)
}

// exitStatus describes how the process ended ("exit status 3", "signal:
// killed"); call it only after exited is closed.
func (r *procRunner) exitStatus() string {
	if ps := r.cmd.ProcessState; ps != nil {
		return ps.String()
	}
	return fmt.Sprint(r.waitErr)
}

// Pid is the plugin's process id, 0 before it started.
func (r *procRunner) Pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pid
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *procRunner) Name() string          { return r.cfg.Command }

func (r *procRunner) ID() string {
	if pid := r.Pid(); pid != 0 {
		return strconv.Itoa(pid)
	}
	return ""
}

func (r *procRunner) Diagnose(context.Context) string {
	return fmt.Sprintf("%s did not print a go-plugin handshake line on stdout; is it an acemq-flow plugin "+
		"(built with plugins/sdk, or speaking the protocol in plugins/README.md) for this machine's architecture?", r.cfg.Command)
}

func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}
func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// runnerFunc adapts newProcRunner to go-plugin's ClientConfig.RunnerFunc,
// remembering the runner so the host can kill and watch it.
func runnerFunc(cfg Config, out *atomic.Pointer[procRunner]) func(hclog.Logger, *exec.Cmd, string) (runner.Runner, error) {
	return func(_ hclog.Logger, base *exec.Cmd, socketDir string) (runner.Runner, error) {
		r, err := newProcRunner(cfg, base)
		if err != nil {
			// go-plugin removes the socket folder it made only for a
			// process that started.
			_ = os.RemoveAll(socketDir)
			return nil, err
		}
		r.socketDir = socketDir
		out.Store(r)
		return r, nil
	}
}
