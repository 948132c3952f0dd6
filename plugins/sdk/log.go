package sdk

import (
	"log/slog"
	"os"
	"strings"
)

// Logger returns a logger for handler code. Its records reach the acemq-flow
// runtime's log at their own level, tagged with the plugin's name: they are
// written to the process's standard error as the JSON lines go-plugin
// forwards (keys @level, @message, @timestamp). It is safe for concurrent
// use; level is the lowest level written.
func Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				return slog.String("@level", strings.ToLower(a.Value.Any().(slog.Level).String()))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	}))
}

// LevelFromEnv is the level the environment variable name holds (debug,
// info, warn or error, as slog reads them), or info when it is unset or
// holds anything else.
func LevelFromEnv(name string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv(name))); err != nil {
		return slog.LevelInfo
	}
	return l
}
