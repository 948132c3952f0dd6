package fileblobs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/fileblobs"
	"github.com/acemq/acemq-flow/stores/storetest"
)

func open(t *testing.T, dir string, opts stores.Options) *fileblobs.Store {
	t.Helper()
	s, err := fileblobs.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.RunBlobs(t, func(t *testing.T, opts stores.Options) storetest.BlobBackend {
		dir := filepath.Join(t.TempDir(), "blobs")
		s := open(t, dir, opts)
		return storetest.BlobBackend{
			Blobs: s,
			Peer:  func(t *testing.T) stores.Blobs { return open(t, dir, opts) },
			Corrupt: func(t *testing.T, key string) {
				path, err := s.Path(key)
				if err != nil {
					t.Fatal(err)
				}
				flipFirstByte(t, path)
			},
		}
	}, storetest.Features{Durable: true})
}

// flipFirstByte damages the file in place, keeping its size and time.
func flipFirstByte(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// An operator reads a payload straight from the file its key names: the
// exact bytes, no framing, under DIR/sha256/<first two hex digits>/<hex>.
func TestBlobFileHoldsExactlyThePayload(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, stores.Options{})
	payload := []byte("{\"scan\":\"page 1\"}\n")
	key, err := s.PutBlob(t.Context(), payload)
	if err != nil {
		t.Fatal(err)
	}
	hex := strings.TrimPrefix(key, "sha256:")
	want := filepath.Join(dir, "sha256", hex[:2], hex)
	if p, _ := s.Path(key); p != want {
		t.Fatalf("Path(%s) = %s, want %s", key, p, want)
	}
	got, err := os.ReadFile(want)
	if err != nil {
		t.Fatalf("read the blob's file: %v", err)
	}
	if string(got) != string(payload) {
		t.Fatalf("the blob's file holds %q, want exactly the payload %q", got, payload)
	}
	fi, _ := os.Stat(want)
	if fi.Mode().Perm()&0o004 != 0 {
		t.Fatalf("blob file mode %v is world-readable, want owner and group only", fi.Mode().Perm())
	}
	// Nothing is left behind in tmp/ by a put.
	if left, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(left) != 0 {
		t.Fatalf("tmp/ after a put holds %d files, want none", len(left))
	}
}

// A corrupted file is named in the error, so the operator knows which file
// to restore.
func TestCorruptBlobNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, stores.Options{})
	key, err := s.PutBlob(t.Context(), []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	path, _ := s.Path(key)
	flipFirstByte(t, path)
	_, err = s.GetBlob(t.Context(), key)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), key) {
		t.Fatalf("GetBlob of a corrupted file = %v, want an error naming %s and %s", err, key, path)
	}
}

func TestOpenRefusesNoDirectory(t *testing.T) {
	if _, err := fileblobs.Open("", stores.Options{}); err == nil || !strings.Contains(err.Error(), "file:DIR") {
		t.Fatalf("Open(\"\") = %v, want an error saying to give file:DIR", err)
	}
	// A directory that cannot be created (under a file) fails at Open.
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fileblobs.Open(filepath.Join(f, "blobs"), stores.Options{}); err == nil || !strings.Contains(err.Error(), f) {
		t.Fatalf("Open under a file = %v, want an error naming the directory", err)
	}
}

// TestUnavailable: a put whose directory cannot be written (its tmp is a
// file now), and a get whose blob cannot be read (a directory where the
// file goes), fail as the store's outage (stores.ErrUnavailable), which the
// runtime waits out instead of spending the message's attempts; a blob
// that is simply not there is still missing, not an outage.
func TestUnavailable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "blobs")
	s := open(t, dir, stores.Options{})
	key, err := s.PutBlob(t.Context(), []byte("kept"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tmp"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutBlob(t.Context(), []byte("new content")); !errors.Is(err, stores.ErrUnavailable) {
		t.Errorf("PutBlob with %s/tmp a file = %v, want an error matching stores.ErrUnavailable", dir, err)
	}
	path, _ := s.Path(key)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	var missing *stores.MissingBlobError
	if _, err := s.GetBlob(t.Context(), key); !errors.As(err, &missing) || errors.Is(err, stores.ErrUnavailable) {
		t.Errorf("GetBlob of a removed blob = %v, want a *stores.MissingBlobError and no outage", err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetBlob(t.Context(), key); !errors.Is(err, stores.ErrUnavailable) {
		t.Errorf("GetBlob of a blob whose file is a directory = %v, want an error matching stores.ErrUnavailable", err)
	}
}
