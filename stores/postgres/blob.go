package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

var (
	_ stores.Blobs     = (*Store)(nil)
	_ stores.BlobStore = (*Store)(nil)
)

// PutBlob implements stores.Blobs: one INSERT … ON CONFLICT, so racing puts
// of the same content on any number of replicas store one row, and a
// repeated put moves the row's stored_at forward (never back, whatever the
// replicas' clocks). A purge's DELETE racing it either ran first (the put
// inserts the row anew) or sees the refreshed time and keeps the row.
func (s *Store) PutBlob(ctx context.Context, content []byte) (_ string, err error) {
	defer unavailable(&err)
	key := stores.BlobKey(content)
	if content == nil {
		content = []byte{} // NOT NULL: the empty payload is an empty bytea
	}
	// A row already there is only touched: the content is not sent again.
	tag, err := s.pool.Exec(ctx, `UPDATE acemq_blobs SET stored_at = greatest(stored_at, $2) WHERE key = $1 AND size = $3`,
		key, s.opts.Now(), int64(len(content)))
	if err == nil && tag.RowsAffected() == 1 {
		return key, nil
	}
	if err == nil {
		_, err = s.pool.Exec(ctx, `INSERT INTO acemq_blobs (key, size, content, stored_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (key) DO UPDATE SET stored_at = greatest(acemq_blobs.stored_at, excluded.stored_at)`,
			key, int64(len(content)), content, s.opts.Now())
	}
	if err != nil {
		return "", fmt.Errorf("put blob %s: %w", key, err)
	}
	return key, nil
}

// GetBlob implements stores.Blobs.
func (s *Store) GetBlob(ctx context.Context, key string) (_ []byte, err error) {
	defer unavailable(&err)
	if _, err := stores.BlobDigest(key); err != nil {
		return nil, err
	}
	var content []byte
	err = s.pool.QueryRow(ctx, `SELECT content FROM acemq_blobs WHERE key = $1`, key).Scan(&content)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &stores.MissingBlobError{Key: key}
	}
	if err != nil {
		return nil, fmt.Errorf("get blob %s: %w", key, err)
	}
	if content == nil {
		content = []byte{}
	}
	if err := stores.CheckBlob(key, content); err != nil {
		return nil, err
	}
	return content, nil
}

// StatBlob implements stores.Blobs from the size and stored_at columns.
func (s *Store) StatBlob(ctx context.Context, key string) (stores.BlobInfo, error) {
	if _, err := stores.BlobDigest(key); err != nil {
		return stores.BlobInfo{}, err
	}
	info := stores.BlobInfo{Key: key}
	err := s.pool.QueryRow(ctx, `SELECT size, stored_at FROM acemq_blobs WHERE key = $1`, key).Scan(&info.Size, &info.Stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return stores.BlobInfo{}, &stores.MissingBlobError{Key: key}
	}
	if err != nil {
		return stores.BlobInfo{}, fmt.Errorf("stat blob %s: %w", key, err)
	}
	return info, nil
}

// PurgeBlobs implements stores.Blobs, backend.PurgeBatch rows a statement
// (fewer when blobs are large would be kinder to the WAL; a row's content
// is TOASTed, and deleting it writes little).
func (s *Store) PurgeBlobs(ctx context.Context, before time.Time) (int64, error) {
	return backend.PurgeInBatches(func(limit int, purged int64) (int64, error) {
		tag, err := s.pool.Exec(ctx, `DELETE FROM acemq_blobs WHERE key IN (
    SELECT key FROM acemq_blobs WHERE stored_at < $1 ORDER BY stored_at LIMIT $2)
AND stored_at < $1`, before, limit)
		if err != nil {
			return 0, fmt.Errorf("purge blobs (%d purged before the failure): %w", purged, err)
		}
		return tag.RowsAffected(), nil
	})
}
