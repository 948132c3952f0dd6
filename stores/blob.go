package stores

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// DefaultBlobRetention is how long a blob is kept after it was last put
// when `--blob-retention` is not given (FLOW-FORMAT §6: 30 days). It must
// outlast every queue TTL, retry ladder, .dlq and manual replay of the
// messages that carry the blob's key.
const DefaultBlobRetention = 30 * 24 * time.Hour

// BlobKeyPrefix starts every blob key: the claim check's keys are SHA-256
// digests (FLOW-FORMAT §6).
const BlobKeyPrefix = "sha256:"

// BlobKey returns the key content is stored under: "sha256:" and the
// lower-case hex SHA-256 of its bytes, the value of the claim check's
// x-acemq-claim-check header. The same bytes always have the same key.
func BlobKey(content []byte) string {
	sum := sha256.Sum256(content)
	return BlobKeyPrefix + hex.EncodeToString(sum[:])
}

// BlobDigest returns the 64 lower-case hex digits of key, or an error when
// key is not "sha256:" followed by exactly those. Backends call it before
// they use a key (a file backend builds a path from the digest, so nothing
// else may reach the file system).
func BlobDigest(key string) (string, error) {
	d, ok := strings.CutPrefix(key, BlobKeyPrefix)
	if !ok || len(d) != 2*sha256.Size || strings.Trim(d, "0123456789abcdef") != "" {
		return "", fmt.Errorf("blob key %q is not %s followed by 64 lower-case hex digits (the SHA-256 of the content)", key, BlobKeyPrefix)
	}
	return d, nil
}

// CheckBlob returns a *CorruptBlobError when content does not hash to key,
// and nil when it does. Every backend's GetBlob calls it on what it read.
func CheckBlob(key string, content []byte) error {
	if got := BlobKey(content); got != key {
		return &CorruptBlobError{Key: key, Sum: got, Size: int64(len(content))}
	}
	return nil
}

// BlobInfo is what StatBlob tells of a blob without reading it: its key,
// its size in bytes and when it was last put (the store's clock), which is
// what PurgeBlobs measures its age from.
type BlobInfo struct {
	Key    string
	Size   int64
	Stored time.Time
}

// Blobs is the claim check's blob store (FLOW-FORMAT §6): payloads too big
// to travel on a queue, each kept under the SHA-256 of its bytes.
//
// Protocol: the runtime puts a body above the claim-check threshold with
// PutBlob and publishes the key instead of the body; a consumer of the
// message gets the body back with GetBlob, which checks the bytes against
// the key, so a damaged copy is never handed to a handler. StatBlob is for
// operator tools (`inspect` shows a key's size without fetching it).
// PurgeBlobs runs on a schedule with the other purges and deletes the blobs
// last put before the retention's cut-off.
//
// Age: a blob's time is that of its last PutBlob. Putting the same content
// again (another message with the same payload, a replay that stores it
// anew) refreshes the time, so a blob lives for the retention after the
// newest message that references it was written, never less. GetBlob does
// not refresh it: reading a message late does not extend its payload's
// life, so retention must outlast the longest a message can wait (queue
// TTLs, the retry ladder, the .dlq, replay).
//
// Errors: a key that is not sha256:<64 hex digits> is refused before any
// I/O; a key the store does not hold is a *MissingBlobError (purged or never
// stored); content that does not hash to its key is a *CorruptBlobError.
// Both are permanent for that message: the caller dead-letters it with the
// error as the reason, never retries it. Any other error is a failure of
// the store and decides nothing: the caller retries.
//
// Implementations are safe for concurrent use, across handles and
// processes on the same data: racing puts of the same content store it
// once and all succeed, and a purge never deletes a blob whose put it
// raced with.
type Blobs interface {
	// PutBlob stores content under BlobKey(content) and returns the key.
	// It is idempotent by key: content already stored is not written
	// again, and its time is refreshed. It returns once the blob is
	// durable.
	PutBlob(ctx context.Context, content []byte) (key string, err error)

	// GetBlob returns the content stored under key, checked against key.
	GetBlob(ctx context.Context, key string) ([]byte, error)

	// StatBlob returns the size and time of the blob under key, without
	// reading or checking its content.
	StatBlob(ctx context.Context, key string) (BlobInfo, error)

	// PurgeBlobs deletes the blobs last put before before and returns how
	// many it deleted. The caller passes the store clock's now less the
	// blob retention.
	PurgeBlobs(ctx context.Context, before time.Time) (int64, error)
}

// BlobStore is a blob store opened from a `--blobs` URL
// (storeurl.OpenBlobs): the Blobs, and the lifecycle a Set has. Migrate
// creates what the store needs (PostgreSQL: the acemq_blobs table;
// file: nothing beyond the directory Open made); CheckSchema says whether
// it is there; Close releases the store and is idempotent.
type BlobStore interface {
	Blobs
	Migrate(ctx context.Context) error
	CheckSchema(ctx context.Context) error
	Close() error
}

// MissingBlobError is returned by GetBlob and StatBlob for a key the store
// does not hold.
type MissingBlobError struct {
	Key string
}

// Error names the key and the likely cause.
func (e *MissingBlobError) Error() string {
	return fmt.Sprintf("blob %s is not in the blob store: it was purged (last put longer ago than --blob-retention) or never stored there; a message that references it cannot be read", e.Key)
}

// CorruptBlobError is returned by GetBlob when the content stored under Key
// does not hash to it: the stored copy was damaged. Sum is what the
// content read hashes to, and Size its length.
type CorruptBlobError struct {
	Key  string
	Sum  string
	Size int64
}

// Error names the key, what the content hashes to, and what to do.
func (e *CorruptBlobError) Error() string {
	return fmt.Sprintf("blob %s fails its SHA-256 check: the %d bytes stored hash to %s; the stored copy is damaged, restore the file or row from a backup", e.Key, e.Size, e.Sum)
}
