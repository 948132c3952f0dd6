package sdk

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// Option configures Serve.
type Option func(*serveConfig)

type serveConfig struct {
	logLevel slog.Level
}

// WithLogLevel sets the lowest level of the plugin-side serving machinery's
// own log lines (default: slog.LevelInfo). It does not affect Logger.
func WithLogLevel(l slog.Level) Option {
	return func(c *serveConfig) { c.logLevel = l }
}

// Serve serves handlers to the acemq-flow runtime that started this
// process, and returns when the runtime stops the plugin. It is meant to be
// the only call in a plugin's main.
//
// Run by hand rather than by the runtime, Serve prints a message saying so
// and exits with status 1; with an invalid handler set (see NewServer) it
// prints the problems and exits with status 1 too.
func Serve(handlers map[string]Handler, opts ...Option) {
	cfg := serveConfig{logLevel: slog.LevelInfo}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := NewServer(handlers)
	if err != nil {
		fmt.Fprintf(stderr, "acemq-flow plugin: invalid handlers: %v\n", err)
		os.Exit(1)
	}
	serveCallSocket(srv.(*server))
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: handshake(),
		Plugins:         plugin.PluginSet{proto.PluginName: &grpcPlugin{server: srv}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			// A payload is as large as the broker allows; gRPC's 4 MiB
			// default would fail large messages as a transport error.
			opts = append(opts, grpc.MaxRecvMsgSize(math.MaxInt32), grpc.MaxSendMsgSize(math.MaxInt32),
				// Fixed, large windows: the call stream never waits for
				// window updates, and gRPC sends no bandwidth probes.
				grpc.InitialWindowSize(16<<20), grpc.InitialConnWindowSize(16<<20),
				// Buffers that are not cleared on reuse (proto.Buffers).
				grpc.ForceServerCodecV2(proto.Codec), experimental.BufferPool(proto.Buffers))
			return grpc.NewServer(opts...)
		},
		Logger: hclog.New(&hclog.LoggerOptions{
			Name:       "sdk",
			Level:      hclogLevel(cfg.logLevel),
			Output:     stderr,
			JSONFormat: true,
		}),
	})
}

// serveCallSocket serves calls on the call socket the host offers, if it
// offers one (proto.CallsFDEnv), before the handshake line is printed: the
// host looks for the socket's first frame once the plugin has answered
// Describe. Without it, or if it cannot be used, calls come over gRPC.
func serveCallSocket(srv *server) {
	v, ok := os.LookupEnv(proto.CallsFDEnv)
	if !ok {
		return
	}
	// Not for the handlers' own child processes.
	_ = os.Unsetenv(proto.CallsFDEnv)
	f, err := proto.FramesFromFD(v)
	if err != nil {
		fmt.Fprintf(stderr, "acemq-flow plugin: %v; calls come over gRPC instead\n", err)
		return
	}
	if err := srv.serveSocket(f); err != nil {
		fmt.Fprintf(stderr, "acemq-flow plugin: call socket: %v; calls come over gRPC instead\n", err)
	}
}

// handshake returns the go-plugin handshake acemq-flow plugins answer,
// built from the constants in plugins/proto.
func handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  proto.ProtocolVersion,
		MagicCookieKey:   proto.MagicCookieKey,
		MagicCookieValue: proto.MagicCookieValue,
	}
}

// grpcPlugin registers the Plugin service on go-plugin's gRPC server. The
// plugin side never dispenses a client.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	server proto.PluginServer
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	proto.RegisterPluginServer(s, p.server)
	return nil
}

func (p *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, fmt.Errorf("the plugin side of %q serves; it has no client", proto.PluginName)
}

func hclogLevel(l slog.Level) hclog.Level {
	switch {
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	}
	return hclog.Error
}
