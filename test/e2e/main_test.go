// Package e2e runs the acemq-flow binary against the real broker: flows from
// files, plugins as processes, messages sent and received over AMQP.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	repo   string // the repository's root
	binary string // bin/acemq-flow, built by TestMain
)

// TestMain builds the binary and the example plugins once, where `make
// build` puts them, so example flows find their plugins.
func TestMain(m *testing.M) {
	wd, _ := os.Getwd()
	repo = filepath.Clean(filepath.Join(wd, "..", ".."))
	binary = filepath.Join(repo, "bin", "acemq-flow")
	if os.Getenv("ACEMQ_TEST_AMQP_URL") != "" {
		cmd := exec.Command("make", "-s", "build")
		cmd.Dir = repo
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "make build: %v\n", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// runtimeProc is `acemq-flow run` as a child process.
type runtimeProc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	log   bytes.Buffer
	done  chan error
	lines chan string
}

// startRuntime starts `acemq-flow run` with args and waits until it logs
// "runtime started" (or exits, which fails the test unless allowExit).
func startRuntime(t *testing.T, url string, args ...string) *runtimeProc {
	t.Helper()
	p := launch(t, url, args...)
	if !p.waitLog(t, `msg="runtime started"`, 60*time.Second) {
		t.Fatalf("the runtime did not start; its log:\n%s", p.output())
	}
	return p
}

func launch(t *testing.T, url string, args ...string) *runtimeProc {
	t.Helper()
	return launchCommand(t, append([]string{"run", "--amqp", url, "--admin", "", "--log-level", "debug"}, args...)...)
}

// launchCommand starts the binary with args (any command) as a child
// process, killed when the test ends.
func launchCommand(t *testing.T, args ...string) *runtimeProc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = os.Stderr
	p := &runtimeProc{cmd: cmd, done: make(chan error, 1), lines: make(chan string, 10000)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- line:
			default:
			}
		}
		close(p.lines)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { p.stop(t, syscall.SIGKILL) })
	return p
}

func (p *runtimeProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitLog waits for a log line containing s; false when the process ended
// or the deadline passed first.
func (p *runtimeProc) waitLog(t *testing.T, s string, d time.Duration) bool {
	t.Helper()
	if strings.Contains(p.output(), s) {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return strings.Contains(p.output(), s)
			}
			if strings.Contains(line, s) {
				return true
			}
		case <-timer.C:
			return strings.Contains(p.output(), s)
		}
	}
}

// stop signals the process and waits for it; it returns the exit error.
func (p *runtimeProc) stop(t *testing.T, sig syscall.Signal) error {
	if p.cmd.ProcessState != nil {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("the runtime did not exit within 60s of %s", sig)
		return <-p.done
	}
}

// wait waits for the process to exit by itself.
func (p *runtimeProc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(d):
		t.Fatalf("the runtime did not exit within %s; its log:\n%s", d, p.output())
		return nil
	}
}

// cli runs the binary with args and returns stdout, stderr and exit code.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = repo
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", binary, args, err)
	}
	return out.String(), errb.String(), code
}

// writeFlow writes a flow file into a temp folder and returns its path. The
// testkit plugin is at bin/plugins/testkit.
func writeFlow(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	body = strings.ReplaceAll(body, "TESTKIT", filepath.Join(repo, "bin", "plugins", "testkit"))
	path := filepath.Join(dir, "flow.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
