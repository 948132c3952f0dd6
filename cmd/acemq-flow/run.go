package main

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime"
)

// envOr returns the environment variable's value, or def.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

const defaultAMQP = "amqp://guest:guest@localhost:5672/"

func newLogger(io streams, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usage("--log-level must be debug, info, warn or error, not %q", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(io.err, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(io.err, opts)), nil
	}
	return nil, usage("--log-format must be text or json, not %q", format)
}

func newRunCmd(io streams) *cobra.Command {
	var (
		amqpURL, admin, token, logLevel, logFormat string
		drain                                      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run PATH...",
		Short: "Run the flows: declare their topology, start plugins and consumers",
		Long: `Run the flows against RabbitMQ: declare the exchanges and queues they need,
start their plugins, and consume. SIGTERM or SIGINT drains: no new
deliveries, handlers in flight finish up to --drain-timeout, the rest is left
for redelivery.

Environment: ACEMQ_AMQP_URL (--amqp), ACEMQ_ADMIN_ADDR (--admin),
ACEMQ_ADMIN_TOKEN (--admin-token).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(io, logLevel, logFormat)
			if err != nil {
				return err
			}
			_, plan, diags := loadAndCompile(io, args)
			_ = renderDiagText(io.err, diags)
			if diags.HasErrors() {
				return failed("the flows are invalid; fix the errors above")
			}
			rt, err := runtime.New(plan, runtime.Options{AMQPURL: amqpURL, AdminAddr: admin, AdminToken: token, DrainTimeout: drain, Log: log})
			if err != nil {
				return failed("%v", err)
			}
			if err := rt.Run(cmd.Context()); err != nil {
				if errors.Is(err, cmd.Context().Err()) && cmd.Context().Err() != nil {
					return nil
				}
				return failed("%v", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&amqpURL, "amqp", envOr("ACEMQ_AMQP_URL", defaultAMQP), "broker URL (env ACEMQ_AMQP_URL)")
	f.StringVar(&admin, "admin", envOr("ACEMQ_ADMIN_ADDR", "127.0.0.1:9464"), "admin listener: health, readiness (env ACEMQ_ADMIN_ADDR); empty disables it")
	f.StringVar(&token, "admin-token", envOr("ACEMQ_ADMIN_TOKEN", ""), "bearer token the admin API requires for calls that change something; required when --admin is not loopback (env ACEMQ_ADMIN_TOKEN)")
	f.DurationVar(&drain, "drain-timeout", 30*time.Second, "how long handlers in flight may finish on shutdown")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
}

// trimAt makes "@file" arguments readable in errors.
func trimAt(s string) string { return strings.TrimPrefix(s, "@") }
