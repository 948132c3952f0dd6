package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/fileblobs"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// purge --blobs deletes the blobs last put longer ago than
// --blob-retention, beside the store's purge, and keeps the rest.
func TestPurgeDeletesOldBlobs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "blobs")
	s, err := fileblobs.Open(dir, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	put := func(content string, age time.Duration) string {
		t.Helper()
		key, err := s.PutBlob(t.Context(), []byte(content))
		if err != nil {
			t.Fatal(err)
		}
		path, _ := s.Path(key)
		at := time.Now().Add(-age)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
		return path
	}
	old := put("put 40 days ago", 40*24*time.Hour)
	month := put("put 29 days ago", 29*24*time.Hour)
	fresh := put("put just now", 0)
	st := storetest.OpenSQLite(t, stores.Options{})

	out, errOut, code := cli(t, "purge", "--store", "sqlite:"+st.Path(), "--blobs", "file:"+dir)
	if code != 0 {
		t.Fatalf("purge --blobs: exit %d\nstderr: %s", code, errOut)
	}
	if !strings.Contains(out, "blobs: deleted 1 blob last put before ") || !strings.Contains(out, "(more than 720h0m0s ago)\n") || !strings.Contains(out, "acemq_outbox: deleted") {
		t.Fatalf("purge --blobs printed %q; want the blob line with the 30-day cut-off and the store's lines", out)
	}
	if _, err := os.Stat(old); err == nil {
		t.Error("the blob put 40 days ago is still there")
	}
	for _, p := range []string{month, fresh} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("a blob put within the retention was deleted: %v", err)
		}
	}

	out, errOut, code = cli(t, "purge", "--store", "memory:", "--blobs", "file:"+dir, "--blob-retention", "24h")
	if code != 0 || !strings.Contains(out, "blobs: deleted 1 blob last put before ") || !strings.Contains(out, "(more than 24h0m0s ago)") {
		t.Fatalf("purge --blob-retention 24h: exit %d, out %q, err %q; want the 29-day-old blob deleted", code, out, errOut)
	}
}

func TestPurgeBlobsOnPostgres(t *testing.T) {
	connURL := testenv.PostgresSchema(t)
	s := storetest.OpenPostgresURL(t, connURL, stores.Options{Now: func() time.Time { return time.Now().Add(-31 * 24 * time.Hour) }})
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	key, err := s.PutBlob(t.Context(), []byte("old"))
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cli(t, "purge", "--store", "memory:", "--blobs", connURL)
	if code != 0 || !strings.Contains(out, "blobs: deleted 1 blob") {
		t.Fatalf("purge --blobs postgres: exit %d, out %q, err %q", code, out, errOut)
	}
	var miss *stores.MissingBlobError
	if _, err := s.GetBlob(t.Context(), key); !errors.As(err, &miss) {
		t.Fatalf("GetBlob after the purge = %v, want the blob gone", err)
	}
}

func TestPurgeBlobsRefusals(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"an unknown blob scheme, without its password", []string{"purge", "--store", "memory:", "--blobs", "s3://k:s3cret@bucket"}, 2, `--blobs: blob store URL has the unknown scheme "s3"`},
		{"a zero blob retention", []string{"purge", "--store", "memory:", "--blobs", "memory:", "--blob-retention", "0s"}, 2, "--blob-retention must be a positive duration"},
		{"a blob directory that does not exist, which purge does not create", []string{"purge", "--store", "memory:", "--blobs", "file:" + filepath.Join(t.TempDir(), "none")}, 1, "does not exist"},
		{"the memory blob store", []string{"purge", "--store", "memory:", "--blobs", "memory:"}, 0, "nothing to purge"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := cli(t, tc.args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) || strings.Contains(out+errOut, "s3cret") {
				t.Errorf("acemq-flow %s: exit %d, want %d and %q (never the password)\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.code, tc.want, out, errOut)
			}
		})
	}
}
