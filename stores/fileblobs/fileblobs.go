// Package fileblobs is the embedded default blob store of the claim check
// (`--blobs file:DIR`, FLOW-FORMAT §6): one file per blob in a directory,
// holding exactly the payload's bytes, so that an operator can read a
// message's payload with cat.
//
// # Layout
//
//	DIR/sha256/ab/ab12…ef   the blob whose key is sha256:ab12…ef (fan-out by its first two hex digits)
//	DIR/tmp/                files being written, and blobs being purged
//
// A blob's time (what the purge measures its age from) is the file's
// modification time, set by the put that wrote it and by every put of the
// same content since.
//
// # Durability and concurrency
//
// A put writes a temporary file under DIR/tmp, fsyncs it, sets its time,
// renames it into place and fsyncs the directory, so a blob is either
// absent or complete, never half written, and a reader never sees a file
// being written. Racing puts of the same content each rename an identical
// file into place. The purge renames a blob it finds old into DIR/tmp, then
// looks at its time again: a put that refreshed it in the meantime wins and
// the blob is renamed back, and a put that came after the rename writes a
// new file. So a purge never deletes a blob a put just returned, across any
// number of processes sharing DIR on one local file system (rename is
// atomic there; NFS and object-store mounts do not promise it: several
// replicas on several machines use the PostgreSQL blob store). A purge
// that dies between moving a blob aside and deleting it leaves the blob as
// DIR/tmp/<hex>.<random>.purge, to be moved back or deleted by hand.
package fileblobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// Store is a blob store in a directory. It is safe for concurrent use, and
// several Stores (in one process or several) may share a directory.
type Store struct {
	dir string
	now func() time.Time
}

var _ stores.BlobStore = (*Store)(nil)

// Permissions: payloads are application data, readable by the runtime's
// user and group (an operator's account in that group reads a blob).
const (
	dirPerm  = 0o750
	filePerm = 0o640
)

// staleTemp is how old (on the file system's clock) a temporary file under
// DIR/tmp must be before a purge deletes it: a put that crashed left it.
const staleTemp = time.Hour

// Open returns the store in dir, creating dir and its tmp and sha256
// subdirectories when missing. Only Now of opts is used (time.Now when
// nil): the time a put gives its blob.
func Open(dir string, opts stores.Options) (*Store, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, fmt.Errorf("open file blob store: no directory given; want file:DIR, e.g. file:/var/lib/acemq/blobs")
	}
	for _, d := range []string{dir, filepath.Join(dir, "tmp"), filepath.Join(dir, "sha256")} {
		if err := os.MkdirAll(d, dirPerm); err != nil {
			return nil, fmt.Errorf("open file blob store %s: %w", dir, err)
		}
	}
	return &Store{dir: dir, now: o.Now}, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Path returns the file that holds (or would hold) the blob under key, or
// the error refusing key.
func (s *Store) Path(key string) (string, error) {
	d, err := stores.BlobDigest(key)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.dir, "sha256", d[:2], d), nil
}

// PutBlob implements stores.Blobs. A file already there with the content's
// size only has its time refreshed; one of another size (which no put
// leaves) is replaced.
func (s *Store) PutBlob(ctx context.Context, content []byte) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	key := stores.BlobKey(content)
	path, _ := s.Path(key)
	now := s.now()
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Size() == int64(len(content)) {
		// The time only moves forward, whatever the clocks of the
		// processes sharing DIR: a blob already younger than now is
		// young enough, and a purge that moved it aside puts it back.
		if !now.After(fi.ModTime()) {
			return key, nil
		}
		// A purge that renamed the file away since the Stat makes this
		// fail with ENOENT, and the content is written anew below.
		if err := os.Chtimes(path, now, now); err == nil {
			return key, nil
		}
	}
	if err := s.write(path, content, now); err != nil {
		// The directory, not the blob, failed (full, read-only, gone): an
		// outage of the store, which the runtime waits out.
		return "", &stores.UnavailableError{Backend: "file", Err: fmt.Errorf("put blob %s in %s: %w", key, s.dir, err)}
	}
	return key, nil
}

func (s *Store) write(path string, content []byte, now time.Time) error {
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), filepath.Base(path)+".*.put")
	if err != nil {
		return err
	}
	tmp := f.Name()
	keep := false
	defer func() {
		if !keep {
			os.Remove(tmp)
		}
	}()
	_, err = f.Write(content)
	if err == nil {
		err = f.Chmod(filePerm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// The time is set before the rename, so a purge never sees the new
	// blob with the temporary file's own time.
	if err := os.Chtimes(tmp, now, now); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), dirPerm); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	keep = true
	return syncDir(filepath.Dir(path))
}

// syncDir makes a rename into dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// GetBlob implements stores.Blobs: the file's bytes, checked against key.
func (s *Store) GetBlob(ctx context.Context, key string) ([]byte, error) {
	path, err := s.Path(key)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	content, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &stores.MissingBlobError{Key: key}
	}
	if err != nil {
		return nil, &stores.UnavailableError{Backend: "file", Err: fmt.Errorf("get blob %s: %w", key, err)}
	}
	if err := stores.CheckBlob(key, content); err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return content, nil
}

// StatBlob implements stores.Blobs: the file's size and modification time.
func (s *Store) StatBlob(ctx context.Context, key string) (stores.BlobInfo, error) {
	path, err := s.Path(key)
	if err != nil {
		return stores.BlobInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return stores.BlobInfo{}, err
	}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return stores.BlobInfo{}, &stores.MissingBlobError{Key: key}
	}
	if err != nil {
		return stores.BlobInfo{}, fmt.Errorf("stat blob %s: %w", key, err)
	}
	return stores.BlobInfo{Key: key, Size: fi.Size(), Stored: fi.ModTime()}, nil
}

// PurgeBlobs implements stores.Blobs: every blob file whose time is before
// before is deleted (see the package comment for why a racing put keeps
// its blob), and so is every temporary file a crashed put left under
// DIR/tmp. It stops at the first error, returning what it deleted until
// then.
func (s *Store) PurgeBlobs(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	fail := func(err error) (int64, error) {
		return n, fmt.Errorf("purge blobs in %s (%d purged before the failure): %w", s.dir, n, err)
	}
	fans, err := os.ReadDir(filepath.Join(s.dir, "sha256"))
	if err != nil {
		return fail(err)
	}
	for _, fan := range fans {
		if !fan.IsDir() {
			continue
		}
		dir := filepath.Join(s.dir, "sha256", fan.Name())
		files, err := os.ReadDir(dir)
		if err != nil {
			return fail(err)
		}
		for _, f := range files {
			if err := ctx.Err(); err != nil {
				return fail(err)
			}
			if _, err := stores.BlobDigest(stores.BlobKeyPrefix + f.Name()); err != nil || !f.Type().IsRegular() {
				continue // not a blob: left for the operator
			}
			deleted, err := s.purgeOne(filepath.Join(dir, f.Name()), before)
			if err != nil {
				return fail(err)
			}
			if deleted {
				n++
			}
		}
	}
	if err := s.purgeTemps(); err != nil {
		return fail(err)
	}
	return n, nil
}

// purgeOne deletes the blob file path if its time is before before, also
// after it has been moved out of a racing put's way.
func (s *Store) purgeOne(path string, before time.Time) (bool, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil || !fi.ModTime().Before(before) {
		return false, err
	}
	aside := filepath.Join(s.dir, "tmp", filepath.Base(path)+"."+randomSuffix()+".purge")
	if err := os.Rename(path, aside); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	// A put whose Chtimes reached the file before the rename has made it
	// young again: it goes back (over any identical copy a later put
	// wrote). A put after the rename found no file and wrote its own.
	fi, err = os.Stat(aside)
	if err != nil {
		return false, err
	}
	if !fi.ModTime().Before(before) {
		return false, os.Rename(aside, path)
	}
	return true, os.Remove(aside)
}

// purgeTemps deletes the temporary files under DIR/tmp older than
// staleTemp on the file system's own clock (a put in progress writes its
// file now).
func (s *Store) purgeTemps() error {
	dir := filepath.Join(s.dir, "tmp")
	files, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	cutoff := time.Now().Add(-staleTemp)
	for _, f := range files {
		fi, err := f.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		// A .purge file is a blob a purge (maybe another process's) is
		// deleting right now: it is that purge's to delete or move back.
		if fi.Mode().IsRegular() && fi.ModTime().Before(cutoff) && filepath.Ext(f.Name()) == ".put" {
			if err := os.Remove(filepath.Join(dir, f.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

func randomSuffix() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Migrate does nothing: Open made the directories.
func (s *Store) Migrate(ctx context.Context) error { return s.CheckSchema(ctx) }

// CheckSchema checks that the store's directories are still there.
func (s *Store) CheckSchema(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, d := range []string{"tmp", "sha256"} {
		if fi, err := os.Stat(filepath.Join(s.dir, d)); err != nil || !fi.IsDir() {
			return fmt.Errorf("file blob store %s: %s/ is missing; it is created when the store is opened", s.dir, d)
		}
	}
	return nil
}

// Close releases nothing (the store holds no open file); it exists so that
// *Store is a stores.BlobStore, and is idempotent.
func (s *Store) Close() error { return nil }
