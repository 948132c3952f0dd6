package main

import (
	"context"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/relay"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func newRelayCmd(s streams) *cobra.Command {
	var (
		storeURL, amqpURL   string
		logLevel, logFormat string
		opts                relay.Options
		purgeEvery, kept    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "relay [--store URL] [--amqp URL] [--batch 100] [--lease 15s] [--poll 200ms]",
		Short: "Publish the outbox's records, until stopped",
		Long: `Run the outbox relay alone: claim up to --batch records under a --lease,
publish each one's bytes unchanged with its stored properties and headers,
and mark it published once the broker confirmed it and routed it to a queue.
A record nothing is bound to receive is retried, and after the store's limit
it is stuck: listed by ` + "`acemq-flow outbox list --stuck`" + `, never published, never
deleted. When fewer than --batch records are waiting the relay polls every
--poll. A record whose deliver_at is still ahead is published into the
delay ladder instead, addressed to its exchange, and delivered when due by
any running runtime (acemq-flow run); the relay declares the ladder the
first time a record needs it. Any number of relays may share a store; a relay that dies loses its
lease and another publishes its records (at least once: consumers
deduplicate on the message id). On PostgreSQL the lease is the row lock of
the relay's open transaction: a relay that dies releases it at once, and one
that hangs is cut off by the database after --lease.

SIGTERM or SIGINT stops claiming and waits, up to one lease, for the records
in flight to be confirmed and marked.

Environment: ACEMQ_STORE_URL (--store), ACEMQ_AMQP_URL (--amqp).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(s, logLevel, logFormat)
			if err != nil {
				return err
			}
			backend, err := storeurl.Backend(storeURL)
			if err != nil {
				return usage("--store: %v", err)
			}
			if backend == "memory" {
				return usage("--store: the relay publishes what other processes wrote, which a memory: store cannot hold; use postgres://… or sqlite:PATH")
			}
			if opts.Batch <= 0 {
				return usage("--batch must be 1 or more, not %d", opts.Batch)
			}
			if opts.Lease <= 0 {
				return usage("--lease must be a positive duration (15s, say), not %s", opts.Lease)
			}
			if opts.Poll <= 0 {
				return usage("--poll must be a positive duration (200ms, say), not %s", opts.Poll)
			}
			if purgeEvery < 0 || kept <= 0 {
				return usage("--purge-every must be 0 (no purges) or positive, and --published-retention positive; not %s and %s", purgeEvery, kept)
			}
			set, err := openStoreWith(cmd.Context(), storeURL, stores.Options{PublishedRetention: kept}, false)
			if err != nil {
				return failed("%v", err)
			}
			defer set.Close()
			opts.Log = log
			log.Info("store opened", "store", redactStore(storeURL))
			tp, stopTracing, err := startTracing(cmd.Context(), log)
			if err != nil {
				return failed("%v", err)
			}
			// Deferred first, run last: the spans of the last records are
			// flushed once the relay has stopped.
			defer stopTracing()
			opts.Tracer = tracing.New(tp)
			// Published records are deleted once they are older than
			// --published-retention: nothing else does it.
			var purges sync.WaitGroup
			ctx, stop := context.WithCancel(cmd.Context())
			defer func() {
				stop()
				purges.Wait()
			}()
			purges.Go(func() { runtime.RunPurges(ctx, set, purgeEvery, log) })
			if err := relay.Run(ctx, amqpURL, set, opts); err != nil {
				return failed("%v", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&storeURL, "store", envOr("ACEMQ_STORE_URL", defaultStore), "store holding the outbox: postgres://… or sqlite:PATH (env ACEMQ_STORE_URL)")
	amqpFlag(f, &amqpURL)
	f.IntVar(&opts.Batch, "batch", 100, "records claimed per round trip")
	f.DurationVar(&opts.Lease, "lease", 15*time.Second, "how long claimed records stay with this relay")
	f.DurationVar(&opts.Poll, "poll", 200*time.Millisecond, "wait between claims when the outbox is drained")
	f.DurationVar(&purgeEvery, "purge-every", time.Hour, "how often published records older than --published-retention are deleted, with the store's expired claims (0: never)")
	f.DurationVar(&kept, "published-retention", stores.DefaultPublishedRetention, "how long published outbox records are kept")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
}
