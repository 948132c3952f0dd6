package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/relay"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
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
		amqpURL, adminAddr, token, logLevel, logFormat string
		storeURL, blobsURL                             string
		drain, claimTimeout, purgeEvery, published     time.Duration
		blobRetention                                  time.Duration
		management                                     string
		createSchema, withRelay, schemaRegistry        bool
		registryReadOnly                               bool
	)
	cmd := &cobra.Command{
		Use:   "run PATH...",
		Short: "Run the flows: declare their topology, start plugins and consumers",
		Long: `Run the flows against RabbitMQ: declare the exchanges and queues they need,
start their plugins, and consume. SIGTERM or SIGINT drains: no new
deliveries, handlers in flight finish up to --drain-timeout, the rest is left
for redelivery.

Environment: ACEMQ_AMQP_URL (--amqp), ACEMQ_ADMIN_ADDR (--admin),
ACEMQ_ADMIN_TOKEN (--admin-token), ACEMQ_STORE_URL (--store),
ACEMQ_BLOBS_URL (--blobs), ACEMQ_MANAGEMENT_URL (--management).

Traces: exported over OTLP when the standard OTEL_* environment asks
(OTEL_TRACES_EXPORTER=otlp, or OTEL_EXPORTER_OTLP_ENDPOINT set); off otherwise.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(io, logLevel, logFormat)
			if err != nil {
				return err
			}
			switch {
			case drain <= 0:
				return usage("--drain-timeout %s must be positive: it is how long handlers in flight may finish on shutdown", drain)
			case purgeEvery < 0:
				return usage("--purge-every %s must be 0 (no purges) or positive", purgeEvery)
			case published <= 0:
				return usage("--published-retention %s must be positive: it is how long published outbox records are kept", published)
			case claimTimeout <= 0:
				return usage("--claim-timeout %s must be positive: it is the lease of an idempotency claim; set it above the slowest handler", claimTimeout)
			}
			if err := checkBlobsFlags(blobsURL, blobRetention); err != nil {
				return err
			}
			fs, pl, diags := loadAndCompile(io, args)
			_ = renderDiagText(io.err, diags)
			if diags.HasErrors() {
				return failed("the flows are invalid; fix the errors above")
			}
			if fs != nil {
				// A claim-checked message that waits longer than the blob
				// retention finds its payload purged (FLOW-FORMAT §6).
				for _, d := range spec.CheckBlobRetention(fs.Flows, blobRetention) {
					log.Warn("a message may outlive its claim-checked payload", "at", d.Pos.String(), "warning", d.Msg, "hint", d.Hint)
				}
			}
			// Refused before anything opens: parts of the format the
			// runtime does not run, an admin listener anyone on the
			// network could use.
			if err := runtime.Supported(pl); err != nil {
				return failed("%v", err)
			}
			if err := admin.CheckExposure(adminAddr, token); err != nil {
				return failed("%v", err)
			}
			opts := runtime.Options{AMQPURL: amqpURL, Management: management, DrainTimeout: drain, Log: log, ClaimTimeout: claimTimeout,
				// Every runtime delivers what is due in the delay ladder, so
				// that send --in to any running flow is delivered.
				Delays: true}
			tp, stopTracing, err := startTracing(cmd.Context(), log)
			if err != nil {
				return failed("%v", err)
			}
			// Deferred first, run last: once the runtime has drained, the
			// spans still batched are flushed.
			defer stopTracing()
			opts.Tracing = tp
			var set stores.Set
			if len(pl.Sagas) > 0 {
				// An instance kept in memory is lost with the process: its
				// steps' messages would then be dead-lettered as belonging
				// to no instance (FLOW-FORMAT §5).
				if backend, _ := storeurl.Backend(storeURL); backend == "memory" {
					return failed("the flows have sagas (%q first), which keep their instances in a store that outlives the process and that every replica shares; memory: keeps nothing beyond this process; use --store sqlite:PATH for one runtime or postgres://… for several", pl.Sagas[0].Name)
				}
			}
			if len(pl.Schedules) > 0 {
				// Ticks kept in memory fire again in every replica and after
				// every restart (FLOW-FORMAT §4).
				if backend, _ := storeurl.Backend(storeURL); backend == "memory" {
					return failed("the flows have schedules, which need a store every replica shares to fire each tick once; memory: keeps nothing beyond this process; use --store sqlite:PATH for one runtime or postgres://… for several")
				}
				// A claimed tick is in the outbox: it must not wait for a
				// relay nobody started.
				withRelay = true
			}
			if runtime.NeedsRegistry(pl) {
				// An id a message carries must resolve as long as the
				// message exists (FLOW-FORMAT §6): ids kept in memory die
				// with the process, and what waits in a queue with them
				// would be dead-lettered.
				if backend, _ := storeurl.Backend(storeURL); backend == "memory" {
					return failed("the flows have Avro types, whose schema ids messages carry and which must outlive the process; memory: keeps nothing beyond it; use --store sqlite:PATH for one runtime or postgres://… for several")
				}
			}
			// The schema registry is served from the store: asking for it
			// opens the store like anything else that needs one.
			// The flows' Avro types are registered in the store's schema
			// registry at start (FLOW-FORMAT §6).
			if needsStore(pl) || withRelay || schemaRegistry || runtime.NeedsRegistry(pl) {
				var err error
				set, err = openStoreWith(cmd.Context(), storeURL, stores.Options{ClaimTimeout: claimTimeout, PublishedRetention: published}, createSchema)
				if err != nil {
					return failed("%v", err)
				}
				defer set.Close()
				opts.Store, opts.Schedules, opts.Sagas = set, set, set
				opts.Registry, opts.RegistryReadOnly = set, registryReadOnly
				log.Info("store opened", "store", redactStore(storeURL))
			}
			blobs, err := openBlobs(cmd.Context(), blobsURL, createSchema)
			switch {
			case err == nil:
				defer blobs.Close()
				opts.Blobs = blobs
				log.Info("blob store opened", "blobs", redactStore(blobsURL), "retention", blobRetention)
				if dir, ok := strings.CutPrefix(blobsURL, "file:"); ok && !filepath.IsAbs(dir) {
					// A relative directory is the working directory's: a
					// runtime started from elsewhere would read another one.
					abs, _ := filepath.Abs(dir)
					log.Info("blob store directory is relative to the working directory; every runtime and send of these flows must use the same one", "directory", abs)
				}
			case cmd.Flags().Changed("blobs") || os.Getenv("ACEMQ_BLOBS_URL") != "":
				return failed("%v", err)
			default:
				// The default directory cannot be made (a read-only working
				// directory, as in a locked-down container): the runtime
				// runs without the claim check rather than not at all.
				log.Warn("claim check off: the default blob store cannot be opened; results travel inline and a claim-checked message is dead-lettered; give --blobs",
					"blobs", blobsURL, "error", err)
			}
			rt, err := runtime.New(pl, opts)
			if err != nil {
				return failed("%v", err)
			}
			var wg sync.WaitGroup
			var relayErr error
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			if adminAddr != "" {
				aopts := admin.Options{Addr: adminAddr, Token: token, Runtime: rt, Plan: pl, Metrics: rt.Metrics(), Log: log}
				statusPage(&aopts, amqpURL, pl, set)
				if set != nil {
					// The Confluent REST subset of the schema registry
					// (FLOW-FORMAT §6), on the store's schemas.
					aopts.Registry = set
				}
				srv, err := admin.New(aopts)
				if err != nil {
					return failed("%v", err)
				}
				if err := srv.Listen(); err != nil {
					return failed("%v", err)
				}
				// It answers until the runtime has drained: /readyz says
				// not ready meanwhile.
				adminCtx, stopAdmin := context.WithCancel(context.WithoutCancel(ctx))
				var served sync.WaitGroup
				defer func() {
					stopAdmin()
					served.Wait()
				}()
				served.Go(func() { _ = srv.Serve(adminCtx) })
			}
			if set != nil {
				// Nothing else deletes expired claims and published outbox
				// records: without purges both tables grow for ever.
				wg.Go(func() { runtime.RunPurges(ctx, set, purgeEvery, log) })
			}
			if opts.Blobs != nil {
				wg.Go(func() { runBlobPurges(ctx, blobs, blobRetention, purgeEvery, log) })
			}
			if withRelay {
				// The outbox relay runs beside the consumers, on its own
				// connection, until the same signal (or the runtime's end)
				// stops both.
				wg.Go(func() {
					relayErr = relay.Run(ctx, amqpURL, set, relay.Options{Log: log, Tracer: tracing.New(tp)})
				})
			}
			err = rt.Run(ctx)
			cancel()
			wg.Wait()
			if err != nil {
				// Stopped by a signal before it started (the broker not up
				// yet): what was asked for is done, exit 0.
				if cmd.Context().Err() != nil {
					return nil
				}
				return failed("%v", err)
			}
			if relayErr != nil {
				return failed("relay: %v", relayErr)
			}
			return nil
		},
	}
	f := cmd.Flags()
	amqpFlag(f, &amqpURL)
	f.StringVar(&adminAddr, "admin", envOr("ACEMQ_ADMIN_ADDR", "127.0.0.1:9464"), "admin listener: health, readiness, metrics, the consumer registry, the status page at / (env ACEMQ_ADMIN_ADDR); empty disables it")
	f.StringVar(&token, "admin-token", envOr("ACEMQ_ADMIN_TOKEN", ""), "bearer token every admin endpoint but /healthz, /readyz and the read-only status page requires (metrics and listings included); required when --admin is not loopback (env ACEMQ_ADMIN_TOKEN)")
	f.DurationVar(&drain, "drain-timeout", 30*time.Second, "how long handlers in flight may finish on shutdown")
	f.StringVar(&storeURL, "store", envOr("ACEMQ_STORE_URL", defaultStore), "the store of idempotency claims, the outbox, schedules' ticks and saga instances: postgres://…, sqlite:PATH or memory: (not for schedules or sagas) (env ACEMQ_STORE_URL)")
	f.DurationVar(&claimTimeout, "claim-timeout", 5*time.Minute, "idempotency claims' lease: set it above the slowest handler")
	f.DurationVar(&purgeEvery, "purge-every", time.Hour, "how often the store's expired claims and old published outbox records are deleted (0: never; acemq-flow purge does it once)")
	f.DurationVar(&published, "published-retention", stores.DefaultPublishedRetention, "how long published outbox records are kept before a purge deletes them")
	f.StringVar(&management, "management", envOr("ACEMQ_MANAGEMENT_URL", ""), "the broker's management API, where topology checks read queues and exchanges (env ACEMQ_MANAGEMENT_URL; default: http://<amqp host>:15672 with the --amqp user; off to keep away)")
	f.BoolVar(&withRelay, "relay", false, "also run the outbox relay on --store (always on when the flows have schedules: it publishes their firings)")
	f.StringVar(&blobsURL, "blobs", envOr("ACEMQ_BLOBS_URL", storeurl.DefaultBlobs), "the claim check's blob store, where bodies above claim_check.above are kept: file:DIR, sqlite:PATH or postgres://… (env ACEMQ_BLOBS_URL); every runtime and send of the flows must use the same one")
	f.DurationVar(&blobRetention, "blob-retention", stores.DefaultBlobRetention, "keep a blob this long after its last put; it must outlast every queue TTL, retry ladder, .dlq and replay (validate warns)")
	f.BoolVar(&schemaRegistry, "schema-registry", false, "serve the schema registry (the Confluent REST subset) on --admin from --store, even when the flows need no store")
	f.BoolVar(&registryReadOnly, "registry-readonly", false, "only look the flows' Avro types up in the schema registry, never register them: a subject without its type's schema stops the start, naming it")
	f.BoolVar(&createSchema, "create-schema", false, "create the store's tables if missing (development only; otherwise run acemq-flow migrate)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
}
