package memory

import (
	"context"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// Blobs is the in-memory blob store, for tests only: a map behind a mutex,
// forgotten on Close. It is safe for concurrent use. The zero value is not
// usable; call OpenBlobs.
type Blobs struct {
	now func() time.Time

	mu     sync.Mutex
	closed bool
	blobs  map[string]*blob
}

type blob struct {
	content []byte
	stored  time.Time
}

var _ stores.BlobStore = (*Blobs)(nil)

// OpenBlobs returns an empty blob store on opts.Now (time.Now when nil).
// Only Now of opts is used.
func OpenBlobs(opts stores.Options) (*Blobs, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	return &Blobs{now: o.Now, blobs: map[string]*blob{}}, nil
}

// PutBlob implements stores.Blobs. The content is copied.
func (s *Blobs) PutBlob(ctx context.Context, content []byte) (string, error) {
	key := stores.BlobKey(content)
	if err := s.lock(ctx); err != nil {
		return "", err
	}
	defer s.mu.Unlock()
	if b, ok := s.blobs[key]; ok {
		if now := s.now(); now.After(b.stored) {
			b.stored = now
		}
		return key, nil
	}
	s.blobs[key] = &blob{content: append([]byte{}, content...), stored: s.now()}
	return key, nil
}

// GetBlob implements stores.Blobs: a copy of the content, checked.
func (s *Blobs) GetBlob(ctx context.Context, key string) ([]byte, error) {
	if _, err := stores.BlobDigest(key); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	b, ok := s.blobs[key]
	var content []byte
	if ok {
		content = append([]byte{}, b.content...)
	}
	s.mu.Unlock()
	if !ok {
		return nil, &stores.MissingBlobError{Key: key}
	}
	if err := stores.CheckBlob(key, content); err != nil {
		return nil, err
	}
	return content, nil
}

// StatBlob implements stores.Blobs.
func (s *Blobs) StatBlob(ctx context.Context, key string) (stores.BlobInfo, error) {
	if _, err := stores.BlobDigest(key); err != nil {
		return stores.BlobInfo{}, err
	}
	if err := s.lock(ctx); err != nil {
		return stores.BlobInfo{}, err
	}
	defer s.mu.Unlock()
	b, ok := s.blobs[key]
	if !ok {
		return stores.BlobInfo{}, &stores.MissingBlobError{Key: key}
	}
	return stores.BlobInfo{Key: key, Size: int64(len(b.content)), Stored: b.stored}, nil
}

// PurgeBlobs implements stores.Blobs.
func (s *Blobs) PurgeBlobs(ctx context.Context, before time.Time) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	var n int64
	for k, b := range s.blobs {
		if b.stored.Before(before) {
			delete(s.blobs, k)
			n++
		}
	}
	return n, nil
}

// Migrate does nothing: memory has no schema.
func (s *Blobs) Migrate(ctx context.Context) error { return s.CheckSchema(ctx) }

// CheckSchema reports only whether the store is open.
func (s *Blobs) CheckSchema(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

// Close discards every blob. It is idempotent.
func (s *Blobs) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.blobs = true, nil
	return nil
}

func (s *Blobs) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	return nil
}
