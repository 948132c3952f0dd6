package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

// openBlobs opens the claim check's blob store blobsURL names and checks
// it has what it needs (SQLite and PostgreSQL: the acemq_blobs table),
// creating that only when asked, as openStoreWith does for the store: a
// SQLite file that is not there is refused before it is opened, as
// opening it would create it and leave an empty file behind.
func openBlobs(ctx context.Context, blobsURL string, create bool) (stores.BlobStore, error) {
	if backend, _ := storeurl.BlobsBackend(blobsURL); backend == "sqlite" && !create {
		path := storeurl.SQLitePath(blobsURL)
		if _, err := os.Stat(path); path != "" && errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("the sqlite blob store %s does not exist; run with --create-schema to create it with its acemq_blobs table (or %s naming that file)", redactStore(blobsURL), "`acemq-flow migrate --store`")
		}
	}
	b, err := storeurl.OpenBlobs(ctx, blobsURL, stores.Options{})
	if err != nil {
		return nil, fmt.Errorf("open the blob store %s: %w", redactStore(blobsURL), err)
	}
	if create {
		err = b.Migrate(ctx)
	} else {
		err = b.CheckSchema(ctx)
	}
	if err != nil {
		b.Close()
		var se *stores.SchemaError
		if errors.As(err, &se) {
			return nil, schemaError(blobsURL, se)
		}
		return nil, fmt.Errorf("check the blob store %s: %w", redactStore(blobsURL), err)
	}
	return b, nil
}

// runBlobPurges deletes, at once and then every interval every, the blobs
// last put more than retention ago, until ctx is done, as
// runtime.RunPurges does for the store: nothing else deletes them. A
// failed purge is logged at Warn and decides nothing; the next one deletes
// what it left. every <= 0 turns it off.
func runBlobPurges(ctx context.Context, b stores.Blobs, retention, every time.Duration, log *slog.Logger) {
	if every <= 0 {
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for ctx.Err() == nil {
		start := time.Now()
		n, err := b.PurgeBlobs(ctx, start.Add(-retention))
		switch {
		case err != nil && ctx.Err() != nil:
		case err != nil:
			log.Warn("blob store purge failed", "deleted", n, "duration", time.Since(start), "error", err)
		default:
			log.Info("blob store purged", "deleted", n, "retention", retention, "duration", time.Since(start))
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}
