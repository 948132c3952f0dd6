package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

var (
	_ stores.Blobs     = (*Store)(nil)
	_ stores.BlobStore = (*Store)(nil)
)

// PutBlob implements stores.Blobs: one INSERT … ON CONFLICT, so racing puts
// of the same content, from this handle or another process's, store one
// row, and a repeated put moves the row's stored_at forward (never back). A
// purge's DELETE racing it either ran first (the put inserts the row anew)
// or sees the refreshed time and keeps the row: SQLite's one writer orders
// them.
func (s *Store) PutBlob(ctx context.Context, content []byte) (string, error) {
	key := stores.BlobKey(content)
	if content == nil {
		content = []byte{} // NOT NULL: the empty payload is an empty blob
	}
	now := s.opts.Now().UnixMilli()
	// A row already there is only touched: the content is not written again.
	res, err := s.db.ExecContext(ctx, `UPDATE acemq_blobs SET stored_at = max(stored_at, ?) WHERE key = ? AND size = ?`,
		now, key, int64(len(content)))
	if err == nil {
		if n, _ := res.RowsAffected(); n == 1 {
			return key, nil
		}
		_, err = s.db.ExecContext(ctx, `INSERT INTO acemq_blobs (key, size, content, stored_at) VALUES (?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET stored_at = max(acemq_blobs.stored_at, excluded.stored_at)`,
			key, int64(len(content)), content, now)
	}
	if err != nil {
		return "", fmt.Errorf("put blob %s: %w", key, err)
	}
	return key, nil
}

// GetBlob implements stores.Blobs.
func (s *Store) GetBlob(ctx context.Context, key string) ([]byte, error) {
	if _, err := stores.BlobDigest(key); err != nil {
		return nil, err
	}
	var content []byte
	err := s.db.QueryRowContext(ctx, `SELECT content FROM acemq_blobs WHERE key = ?`, key).Scan(&content)
	if errors.Is(err, sql.ErrNoRows) {
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
	var ms int64
	err := s.db.QueryRowContext(ctx, `SELECT size, stored_at FROM acemq_blobs WHERE key = ?`, key).Scan(&info.Size, &ms)
	if errors.Is(err, sql.ErrNoRows) {
		return stores.BlobInfo{}, &stores.MissingBlobError{Key: key}
	}
	if err != nil {
		return stores.BlobInfo{}, fmt.Errorf("stat blob %s: %w", key, err)
	}
	info.Stored = time.UnixMilli(ms)
	return info, nil
}

// PurgeBlobs implements stores.Blobs, backend.PurgeBatch rows a statement,
// so that the write lock is held briefly and other writers interleave.
func (s *Store) PurgeBlobs(ctx context.Context, before time.Time) (int64, error) {
	cut := before.UnixMilli()
	return backend.PurgeInBatches(func(limit int, purged int64) (int64, error) {
		res, err := s.db.ExecContext(ctx, `DELETE FROM acemq_blobs WHERE key IN (
    SELECT key FROM acemq_blobs WHERE stored_at < ? ORDER BY stored_at LIMIT ?)
AND stored_at < ?`, cut, limit, cut)
		if err != nil {
			return 0, fmt.Errorf("purge blobs (%d purged before the failure): %w", purged, err)
		}
		return res.RowsAffected()
	})
}
