package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func newPurgeCmd(s streams) *cobra.Command {
	var (
		storeURL      string
		published     time.Duration
		blobsURL      string
		blobRetention time.Duration
	)
	cmd := &cobra.Command{
		Use:   "purge [--store URL] [--published-retention 168h] [--blobs URL] [--blob-retention 720h]",
		Short: "Delete expired claims, long-published outbox records, old schedule ticks and ended sagas, once",
		Long: `Delete, once, what the store no longer has to keep: the idempotency claims
whose lease ended, the confirmations past their retention (7 days after the
confirm), the outbox records published more than --published-retention ago,
the schedule ticks claimed before that same cut-off (each schedule's latest
stays: it says where the schedule stopped), and the saga instances that
ended (completed, compensated or unresolved) before it. Records not
published yet, stuck ones, and saga instances still running are never
deleted. run and relay purge their store themselves (--purge-every, hourly
by default); a store only other programs use (an outbox written by
services, relayed elsewhere) needs purge on a schedule, from cron or a
Kubernetes CronJob. It prints what it deleted, a line per table.

With --blobs it first purges the claim check's blob store too: the blobs
last put more than --blob-retention ago (30 days by default; a blob's time
is that of its last put).

Environment: ACEMQ_STORE_URL (--store), ACEMQ_BLOBS_URL (--blobs).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			backend, err := storeurl.Backend(storeURL)
			if err != nil {
				return usage("--store: %v", err)
			}
			if published <= 0 {
				return usage("--published-retention must be a positive duration (168h, say), not %s", published)
			}
			if err := checkBlobsFlags(blobsURL, blobRetention); err != nil {
				return err
			}
			// Each purge runs even when the other fails.
			blobErr := purgeBlobs(cmd.Context(), s.out, blobsURL, blobRetention)
			if backend == "memory" {
				fmt.Fprintln(s.out, "the memory store keeps nothing between runs; nothing to purge")
				return blobErr
			}
			set, err := openStoreWith(cmd.Context(), storeURL, stores.Options{PublishedRetention: published}, false)
			if err != nil {
				return failed("%v", err)
			}
			defer set.Close()
			p, err := set.Purge(cmd.Context())
			// The counts are true even after a failure: what was deleted
			// before it.
			renderPurged(s.out, p, published)
			if err != nil {
				return failed("purge the store %s: %v", redactStore(storeURL), err)
			}
			return blobErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&storeURL, "store", envOr("ACEMQ_STORE_URL", defaultStore), "store to purge: postgres://… or sqlite:PATH (env ACEMQ_STORE_URL)")
	f.DurationVar(&published, "published-retention", stores.DefaultPublishedRetention, "keep outbox records this long after they were published, and schedule ticks and ended sagas as long")
	f.StringVar(&blobsURL, "blobs", os.Getenv("ACEMQ_BLOBS_URL"), "also purge this claim-check blob store: file:DIR, sqlite:PATH or postgres://… (env ACEMQ_BLOBS_URL)")
	f.DurationVar(&blobRetention, "blob-retention", stores.DefaultBlobRetention, "keep a blob this long after its last put")
	return cmd
}

// renderPurged writes a sentence per table saying what a purge deleted.
func renderPurged(w io.Writer, p stores.Purged, published time.Duration) {
	count := func(n int64, one, many string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	fmt.Fprintf(w, "acemq_idempotency: deleted %s\n",
		count(p.Expired, "expired claim or confirmation", "expired claims and confirmations"))
	before := p.PublishedBefore.UTC().Format(time.RFC3339)
	fmt.Fprintf(w, "acemq_outbox: deleted %s published before %s (more than %s ago)\n",
		count(p.Published, "record", "records"), before, published)
	fmt.Fprintf(w, "acemq_schedule_ticks: deleted %s claimed before %s (each schedule's latest kept)\n",
		count(p.Ticks, "tick", "ticks"), before)
	fmt.Fprintf(w, "acemq_sagas: deleted %s ended before %s\n",
		count(p.Sagas, "saga instance", "saga instances"), before)
}
