package host

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter is the hclog.Logger go-plugin logs through, writing to the
// runtime's slog logger. Two kinds of records pass through it: the plugin's
// own stderr lines (go-plugin logs them through a logger Named after the
// executable), which keep their level, and go-plugin's bookkeeping, which
// is demoted to Debug because the host logs the events that matter
// (exited, restarted) itself.
type hclogAdapter struct {
	log        *slog.Logger
	outputName string // Named() value that marks the plugin's own output
	isOutput   bool
	name       string
	args       []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHclogAdapter(l *slog.Logger, outputName string) *hclogAdapter {
	return &hclogAdapter{log: l, outputName: outputName}
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	lvl := slogLevel(level)
	switch {
	case !a.isOutput && lvl > slog.LevelDebug:
		lvl = slog.LevelDebug
	case a.isOutput && level == hclog.Debug && len(args) == 0:
		// A plain stderr line (go-plugin logs it at Debug; a JSON record
		// always carries its timestamp): what a plugin prints without a
		// level is meant for a person, a traceback at start-up above all.
		lvl = slog.LevelInfo
	}
	ctx := context.Background()
	if !a.log.Enabled(ctx, lvl) {
		return
	}
	attrs := make([]any, 0, len(a.args)+len(args))
	attrs = append(attrs, a.args...)
	for i := 0; i+1 < len(args); i += 2 {
		key := args[i]
		switch key {
		case "timestamp":
			continue // the runtime's log has its own time
		case "plugin":
			key = "command" // go-plugin's name for the executable; ours is the flow's name
		}
		attrs = append(attrs, key, args[i+1])
	}
	a.log.Log(ctx, lvl, msg, attrs...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(l hclog.Level) bool {
	return a.log.Enabled(context.Background(), slogLevel(l))
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.args }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.args = append(append([]any(nil), a.args...), args...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	c.isOutput = name == a.outputName
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	c.isOutput = name == a.outputName
	return &c
}

// SetLevel is ignored: the slog handler decides.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

// GetLevel reports the lowest level the slog handler accepts; go-plugin
// skips parsing plugin log lines below it.
func (a *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if a.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &lineWriter{log: a.log, stream: "log"}
}

// lineWriter logs each complete line written to it at Info: the plugin's
// os.Stdout and os.Stderr after the SDK took them over, which go-plugin
// relays through its stdio stream.
type lineWriter struct {
	log    *slog.Logger
	stream string
	mu     sync.Mutex
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		if line := bytes.TrimRight(w.buf[:i], "\r"); len(line) > 0 {
			w.log.Info("plugin output", "stream", w.stream, "line", string(line))
		}
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a very long line without a newline: log what we have
		w.log.Info("plugin output", "stream", w.stream, "line", string(w.buf))
		w.buf = w.buf[:0]
	}
	return len(p), nil
}
