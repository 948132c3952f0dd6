package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

// checkBlobsFlags refuses a --blobs URL of an unknown scheme and a
// retention that is not positive, before anything is opened.
func checkBlobsFlags(blobsURL string, retention time.Duration) error {
	if blobsURL != "" {
		if _, err := storeurl.BlobsBackend(blobsURL); err != nil {
			return usage("--blobs: %v", err)
		}
	}
	if retention <= 0 {
		return usage("--blob-retention must be a positive duration (720h, say), not %s", retention)
	}
	return nil
}

// purgeBlobs deletes, once, the blobs of the blob store blobsURL last put
// more than retention ago, and says so on w; nothing when blobsURL is
// empty. It creates nothing: a file: directory that is not there is an
// error, as a SQLite file is to the store's purge.
func purgeBlobs(ctx context.Context, w io.Writer, blobsURL string, retention time.Duration) error {
	if blobsURL == "" {
		return nil
	}
	where := redactStore(blobsURL)
	switch backend, _ := storeurl.BlobsBackend(blobsURL); backend {
	case "memory":
		fmt.Fprintln(w, "blobs: the memory blob store keeps nothing between runs; nothing to purge")
		return nil
	case "file":
		if fi, err := os.Stat(storeurl.FilePath(blobsURL)); err != nil || !fi.IsDir() {
			return failed("the blob store %s does not exist (no such directory); give the --blobs the runtime uses", where)
		}
	case "sqlite":
		if fi, err := os.Stat(storeurl.SQLitePath(blobsURL)); err != nil || fi.IsDir() {
			return failed("the blob store %s does not exist (no such file); give the --blobs the runtime uses", where)
		}
	}
	b, err := storeurl.OpenBlobs(ctx, blobsURL, stores.Options{})
	if err != nil {
		return failed("open the blob store %s: %v", where, err)
	}
	defer b.Close()
	before := time.Now().Add(-retention)
	n, err := b.PurgeBlobs(ctx, before)
	blobs := fmt.Sprintf("%d blobs", n)
	if n == 1 {
		blobs = "1 blob"
	}
	// The count is true even after a failure: what was deleted before it.
	fmt.Fprintf(w, "blobs: deleted %s last put before %s (more than %s ago)\n", blobs, before.UTC().Format(time.RFC3339), retention)
	if err != nil {
		return failed("purge the blob store %s: %v", where, err)
	}
	return nil
}
