package storeurl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
	"github.com/acemq/acemq-flow/test/testenv"
)

func TestBlobsBackend(t *testing.T) {
	cases := []struct {
		name, url, want string
	}{
		{"file with an absolute directory selects file", "file:/var/lib/acemq/blobs", "file"},
		{"file with a relative directory selects file", "file:blobs", "file"},
		{"file with three slashes selects file", "file:///var/lib/acemq/blobs", "file"},
		{"postgres scheme selects postgres", "postgres://u@h/db", "postgres"},
		{"postgresql scheme selects postgres", "postgresql://u@h/db", "postgres"},
		{"sqlite selects sqlite", "sqlite:flow.db", "sqlite"},
		{"sqlite with three slashes selects sqlite", "sqlite:///var/lib/acemq/flow.db", "sqlite"},
		{"memory selects memory", "memory:", "memory"},
		{"the default selects file", storeurl.DefaultBlobs, "file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := storeurl.BlobsBackend(tc.url)
			if err != nil || got != tc.want {
				t.Fatalf("BlobsBackend(%q) = %q, %v; want %q", tc.url, got, err, tc.want)
			}
		})
	}
	for _, u := range []string{"s3://key:hunter2@bucket", "hunter2"} {
		_, err := storeurl.BlobsBackend(u)
		if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "file:DIR") {
			t.Errorf("BlobsBackend(%q) = %v, want an error listing file:DIR, without the password", u, err)
		}
	}
}

func TestFilePath(t *testing.T) {
	cases := map[string]string{
		"file:blobs":                  "blobs",
		"file:./data/blobs":           "./data/blobs",
		"file:/var/lib/acemq/blobs":   "/var/lib/acemq/blobs",
		"file:///var/lib/acemq/blobs": "/var/lib/acemq/blobs",
		"file://relative/blobs":       "relative/blobs",
		"file:/tmp/with space":        "/tmp/with space",
	}
	for in, want := range cases {
		if got := storeurl.FilePath(in); got != want {
			t.Errorf("FilePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOpenBlobs(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "blobs")
	urls := []string{"file:" + dir, "sqlite:" + filepath.Join(t.TempDir(), "blobs.db"), "memory:"}
	if os.Getenv("ACEMQ_TEST_POSTGRES_URL") != "" {
		pg := testenv.PostgresSchema(t)
		urls = append(urls, pg)
	}
	for _, u := range urls {
		s, err := storeurl.OpenBlobs(ctx, u, stores.Options{})
		if err != nil {
			t.Fatalf("OpenBlobs(%s): %v", stores.Redact(u), err)
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("OpenBlobs(%s).Migrate: %v", stores.Redact(u), err)
		}
		key, err := s.PutBlob(ctx, []byte("payload"))
		if err != nil {
			t.Fatalf("OpenBlobs(%s).PutBlob: %v", stores.Redact(u), err)
		}
		if got, err := s.GetBlob(ctx, key); err != nil || string(got) != "payload" {
			t.Fatalf("OpenBlobs(%s).GetBlob = %q, %v; want the payload", stores.Redact(u), got, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The file store's blob is where file:DIR said.
	hex := strings.TrimPrefix(stores.BlobKey([]byte("payload")), "sha256:")
	if _, err := os.Stat(filepath.Join(dir, "sha256", hex[:2], hex)); err != nil {
		t.Fatalf("the file: blob is not under %s: %v", dir, err)
	}
	if _, err := storeurl.OpenBlobs(ctx, "file:", stores.Options{}); err == nil || !strings.Contains(err.Error(), "file:DIR") {
		t.Fatalf("OpenBlobs(file:) = %v, want an error saying to name a directory", err)
	}
}
