package runtime

import (
	"context"
	"log/slog"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// Purger is what RunPurges needs of a store: one retention purge of it.
// Every stores.Set is a Purger.
type Purger interface {
	Purge(ctx context.Context) (stores.Purged, error)
}

// RunPurges purges p at once, then every interval every, until ctx is done:
// nothing else deletes the idempotency store's expired claims and old
// confirmations, or the outbox's published records, so without it both
// tables grow for ever (stores.Set.Purge says what goes).
//
// Each purge is logged at Info ("store purged", with the counts) or, when
// it fails, at Warn ("store purge failed"); a failed purge decides nothing,
// and the next one deletes what it left. A purge cut short by ctx is not a
// failure and is not logged. every <= 0 turns purging off: RunPurges logs
// "store purges off" and returns at once. A nil log discards.
//
// RunPurges blocks until ctx is done and the purge in progress has
// returned; the caller runs it in a goroutine it waits for.
func RunPurges(ctx context.Context, p Purger, every time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if every <= 0 {
		log.Info("store purges off", "every", every)
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for ctx.Err() == nil {
		purgeOnce(ctx, p, log)
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// purgeOnce runs one purge and logs what became of it.
func purgeOnce(ctx context.Context, p Purger, log *slog.Logger) {
	start := time.Now()
	n, err := p.Purge(ctx)
	took := time.Since(start)
	switch {
	case err != nil && ctx.Err() != nil:
		// Shutting down: the next start purges again.
	case err != nil:
		log.Warn("store purge failed", "expired", n.Expired, "published", n.Published, "duration", took, "error", err)
	default:
		log.Info("store purged", "expired", n.Expired, "published", n.Published,
			"published_before", n.PublishedBefore, "duration", took)
	}
}
