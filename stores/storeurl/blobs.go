package storeurl

import (
	"context"
	"fmt"
	"strings"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/fileblobs"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/stores/sqlite"
)

// DefaultBlobs is the blob store `--blobs` names when it is not given: the
// embedded file store, in the directory the runtime is started in.
const DefaultBlobs = "file:blobs"

// BlobsBackend names the blob store a `--blobs` URL selects: "file",
// "sqlite", "postgres" or "memory".
func BlobsBackend(blobsURL string) (string, error) {
	scheme, _, ok := strings.Cut(blobsURL, ":")
	if !ok {
		// Not echoed: without a scheme there is no telling which part is a
		// password.
		return "", fmt.Errorf("blob store URL has no scheme; want file:DIR, sqlite:PATH, postgres://… or memory:")
	}
	switch strings.ToLower(scheme) {
	case "file":
		return "file", nil
	case "sqlite", "sqlite3":
		return "sqlite", nil
	case "postgres", "postgresql":
		return "postgres", nil
	case "memory":
		return "memory", nil
	}
	return "", fmt.Errorf("blob store URL has the unknown scheme %q; want file:DIR, sqlite:PATH, postgres://… or memory:", scheme)
}

// FilePath returns the directory of a file: URL: file:/var/lib/acemq/blobs
// and file:///var/lib/acemq/blobs are absolute, file:blobs and
// file://blobs relative to the working directory.
func FilePath(blobsURL string) string {
	_, p, _ := strings.Cut(blobsURL, ":")
	return strings.TrimPrefix(p, "//")
}

// OpenBlobs opens the blob store blobsURL names (`--blobs`):
//
//   - file:DIR: one file per blob under DIR (stores/fileblobs), the
//     directory created if missing; the embedded default, DefaultBlobs.
//   - sqlite:PATH: the acemq_blobs table of that SQLite file (it may be
//     the --store file or another); its table comes with the store's
//     migrations. Opening a file that is not there creates it: a caller
//     that must create nothing (run without --create-schema, send,
//     purge) checks for the file first.
//   - postgres://… (or postgresql://): the acemq_blobs table of that
//     database, through a pgx pool of its own (it may be the --store
//     database or another); its table comes with the store's migrations.
//   - memory: an empty in-process store, for tests.
//
// Only opts.Now (and for SQLite opts.LockTimeout) is used. SQLite and
// PostgreSQL create no table: Migrate or
// CheckSchema as for a store. Errors never contain a password.
func OpenBlobs(ctx context.Context, blobsURL string, opts stores.Options) (stores.BlobStore, error) {
	backend, err := BlobsBackend(blobsURL)
	if err != nil {
		return nil, err
	}
	switch backend {
	case "file":
		dir := FilePath(blobsURL)
		if dir == "" {
			return nil, fmt.Errorf("blob store URL %q names no directory; want file:DIR, e.g. file:/var/lib/acemq/blobs", blobsURL)
		}
		return fileblobs.Open(dir, opts)
	case "sqlite":
		return sqlite.Open(ctx, SQLitePath(blobsURL), opts)
	case "postgres":
		return postgres.Open(ctx, blobsURL, opts)
	default:
		return memory.OpenBlobs(opts)
	}
}
