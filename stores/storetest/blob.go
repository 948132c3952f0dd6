package storetest

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// BlobBackend is one fresh blob store under test and the hooks the suite
// needs to reach it from outside.
type BlobBackend struct {
	// Blobs is the store under test, ready and empty.
	Blobs stores.Blobs

	// Peer opens another handle on the same blobs (its own connection pool,
	// or its own Store on the same directory), closed by the test's
	// cleanup. Concurrency cases race Blobs against Peer.
	Peer func(t *testing.T) stores.Blobs

	// Corrupt damages the stored copy of key behind the store's back, as a
	// failing disk or a careless operator would: one byte of the content
	// flipped, the size unchanged (a byte of the file, of the row).
	Corrupt func(t *testing.T, key string)
}

// BlobOpener builds a BlobBackend for one subtest with opts (the suite's
// fake clock in opts.Now).
type BlobOpener func(t *testing.T, opts stores.Options) BlobBackend

// RunBlobs runs the cases of stores.Blobs: content-addressed, idempotent by
// key, checked on every fetch, purged by the age of the last put.
func RunBlobs(t *testing.T, open BlobOpener, f Features) {
	cases := []struct {
		name string
		run  func(t *testing.T, open BlobOpener, f Features)
	}{
		{"a blob is stored under the SHA-256 of its content and reads back byte for byte", blobRoundTrip},
		{"putting the same content twice gives the same key, one blob, and refreshes its time", blobPutTwice},
		{"a repeated put on a replica whose clock is behind does not move the blob's time back", blobTimeOnlyForward},
		{"a missing key is a MissingBlobError naming the key, for get and stat", blobMissing},
		{"a key that is not sha256 and 64 hex digits is refused, and is not reported missing", blobBadKey},
		{"a corrupted blob fails its SHA-256 check naming the key, and stat still sees it", blobCorrupt},
		{"a 10 MiB blob round trips intact", blobLarge},
		{"concurrent puts of the same content on two handles all succeed with one key", blobConcurrentPuts},
		{"the purge deletes blobs last put before the cut-off, and a put since keeps one", blobPurge},
		{"a blob put on one handle reads on another", blobPeer},
		{"a put racing a purge of the same old blob on another handle keeps the blob", blobPutRacesPurge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open, f) })
	}
}

// blobFixture opens a fresh blob store on a fake clock.
func blobFixture(t *testing.T, open BlobOpener) (BlobBackend, *Clock) {
	t.Helper()
	clock := NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	b := open(t, stores.Options{Now: clock.Now})
	if b.Blobs == nil || b.Peer == nil || b.Corrupt == nil {
		t.Fatal("storetest: the BlobOpener must set Blobs, Peer and Corrupt")
	}
	return b, clock
}

func putBlob(t *testing.T, s stores.Blobs, content []byte) string {
	t.Helper()
	key, err := s.PutBlob(t.Context(), content)
	if err != nil {
		t.Fatalf("PutBlob(%d bytes): %v", len(content), err)
	}
	if want := stores.BlobKey(content); key != want {
		t.Fatalf("PutBlob(%d bytes) = key %s, want %s", len(content), key, want)
	}
	return key
}

func wantBlob(t *testing.T, s stores.Blobs, key string, want []byte) {
	t.Helper()
	got, err := s.GetBlob(t.Context(), key)
	if err != nil {
		t.Fatalf("GetBlob(%s): %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("GetBlob(%s) = %d bytes, want the %d bytes put (first difference at %d)", key, len(got), len(want), firstDiff(got, want))
	}
}

func wantStat(t *testing.T, s stores.Blobs, key string, size int64, stored time.Time) {
	t.Helper()
	info, err := s.StatBlob(t.Context(), key)
	if err != nil {
		t.Fatalf("StatBlob(%s): %v", key, err)
	}
	if info.Key != key || info.Size != size || !info.Stored.Equal(stored) {
		t.Fatalf("StatBlob(%s) = %+v, want key %s, size %d, stored %s", key, info, key, size, stored)
	}
}

func wantMissing(t *testing.T, s stores.Blobs, key string) {
	t.Helper()
	var miss *stores.MissingBlobError
	if _, err := s.GetBlob(t.Context(), key); !errors.As(err, &miss) || miss.Key != key || !strings.Contains(err.Error(), key) {
		t.Fatalf("GetBlob(%s) of a key not stored = %v, want a *MissingBlobError naming the key", key, err)
	}
	if _, err := s.StatBlob(t.Context(), key); !errors.As(err, &miss) || miss.Key != key {
		t.Fatalf("StatBlob(%s) of a key not stored = %v, want a *MissingBlobError naming the key", key, err)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func blobRoundTrip(t *testing.T, open BlobOpener, _ Features) {
	b, clock := blobFixture(t, open)
	payload := []byte(`{"order":"A-1","lines":[{"sku":"X","qty":2}]}`)
	key := putBlob(t, b.Blobs, payload)
	// The key of FLOW-FORMAT §6: sha256: and the hex digest.
	if _, err := stores.BlobDigest(key); err != nil {
		t.Fatalf("PutBlob key: %v", err)
	}
	wantBlob(t, b.Blobs, key, payload)
	wantStat(t, b.Blobs, key, int64(len(payload)), clock.Now())

	// The empty payload is a blob like any other.
	empty := putBlob(t, b.Blobs, nil)
	wantBlob(t, b.Blobs, empty, []byte{})
	wantStat(t, b.Blobs, empty, 0, clock.Now())
}

func blobPutTwice(t *testing.T, open BlobOpener, _ Features) {
	b, clock := blobFixture(t, open)
	payload := []byte("the same scanned report")
	first := putBlob(t, b.Blobs, payload)
	put := clock.Now()
	clock.Advance(time.Hour)
	wantStat(t, b.Blobs, first, int64(len(payload)), put)
	second := putBlob(t, b.Blobs, bytes.Clone(payload))
	if second != first {
		t.Fatalf("PutBlob of the same content twice = %s then %s, want one key", first, second)
	}
	wantStat(t, b.Blobs, first, int64(len(payload)), clock.Now())
	wantBlob(t, b.Blobs, first, payload)
	// One blob: a purge just after the first put's time deletes nothing,
	// then one purge after both deletes exactly one.
	if n, err := b.Blobs.PurgeBlobs(t.Context(), put.Add(time.Second)); err != nil || n != 0 {
		t.Fatalf("PurgeBlobs before the refreshed time = %d, %v; want 0 (the second put refreshed the blob)", n, err)
	}
	if n, err := b.Blobs.PurgeBlobs(t.Context(), clock.Now().Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("PurgeBlobs after both puts = %d, %v; want 1 (the same content is one blob)", n, err)
	}
}

func blobMissing(t *testing.T, open BlobOpener, _ Features) {
	b, _ := blobFixture(t, open)
	putBlob(t, b.Blobs, []byte("something else"))
	wantMissing(t, b.Blobs, stores.BlobKey([]byte("never stored")))
}

func blobBadKey(t *testing.T, open BlobOpener, _ Features) {
	b, _ := blobFixture(t, open)
	good := stores.BlobKey([]byte("x"))
	for _, key := range []string{
		"",
		"sha256:",
		strings.TrimPrefix(good, "sha256:"),
		"md5:" + strings.TrimPrefix(good, "sha256:"),
		strings.ToUpper(good[:10]) + good[10:],
		good[:len(good)-1],
		good + "0",
		"sha256:../../../../etc/passwd",
		"sha256:" + strings.Repeat("g", 64),
	} {
		var miss *stores.MissingBlobError
		if _, err := b.Blobs.GetBlob(t.Context(), key); err == nil || errors.As(err, &miss) {
			t.Errorf("GetBlob(%q) = %v, want an error refusing the key (not a missing blob)", key, err)
		}
		if _, err := b.Blobs.StatBlob(t.Context(), key); err == nil || errors.As(err, &miss) {
			t.Errorf("StatBlob(%q) = %v, want an error refusing the key (not a missing blob)", key, err)
		}
	}
}

func blobCorrupt(t *testing.T, open BlobOpener, _ Features) {
	b, clock := blobFixture(t, open)
	payload := []byte(`{"report":"a few kilobytes of a scanned page"}`)
	key := putBlob(t, b.Blobs, payload)
	other := putBlob(t, b.Blobs, []byte("an intact neighbour"))
	b.Corrupt(t, key)

	_, err := b.Blobs.GetBlob(t.Context(), key)
	var bad *stores.CorruptBlobError
	if !errors.As(err, &bad) || bad.Key != key || !strings.Contains(err.Error(), key) {
		t.Fatalf("GetBlob(%s) of a corrupted blob = %v, want a *CorruptBlobError naming the key", key, err)
	}
	if bad.Sum == key || bad.Size != int64(len(payload)) {
		t.Fatalf("CorruptBlobError = %+v, want the damaged content's own sum and its size %d", bad, len(payload))
	}
	// Stat does not read the content: the blob is there, with its size.
	wantStat(t, b.Blobs, key, int64(len(payload)), clock.Now())
	wantBlob(t, b.Blobs, other, []byte("an intact neighbour"))
}

func blobLarge(t *testing.T, open BlobOpener, _ Features) {
	b, clock := blobFixture(t, open)
	payload := randomBytes(t, 10<<20)
	key := putBlob(t, b.Blobs, payload)
	wantBlob(t, b.Blobs, key, payload)
	wantStat(t, b.Blobs, key, 10<<20, clock.Now())
}

func blobConcurrentPuts(t *testing.T, open BlobOpener, _ Features) {
	b, _ := blobFixture(t, open)
	handles := []stores.Blobs{b.Blobs, b.Peer(t)}
	payload := randomBytes(t, 256<<10)
	const goroutines = 16
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		keys  = make([]string, goroutines)
		errs  = make([]error, goroutines)
	)
	for g := range goroutines {
		wg.Go(func() {
			<-start
			keys[g], errs[g] = handles[g%2].PutBlob(t.Context(), bytes.Clone(payload))
		})
	}
	close(start)
	wg.Wait()
	want := stores.BlobKey(payload)
	for g := range goroutines {
		if errs[g] != nil || keys[g] != want {
			t.Fatalf("concurrent PutBlob #%d = %s, %v; want %s", g, keys[g], errs[g], want)
		}
	}
	wantBlob(t, b.Blobs, want, payload)
	wantBlob(t, handles[1], want, payload)
}

func blobPurge(t *testing.T, open BlobOpener, _ Features) {
	b, clock := blobFixture(t, open)
	const retention = 30 * 24 * time.Hour
	old := putBlob(t, b.Blobs, []byte("old and unreferenced"))
	kept := putBlob(t, b.Blobs, []byte("old but put again since"))
	clock.Advance(retention + time.Hour)
	putBlob(t, b.Blobs, []byte("old but put again since"))
	fresh := putBlob(t, b.Blobs, []byte("new"))
	clock.Advance(time.Minute)

	n, err := b.Blobs.PurgeBlobs(t.Context(), clock.Now().Add(-retention))
	if err != nil || n != 1 {
		t.Fatalf("PurgeBlobs(now - %s) = %d, %v; want 1 (the blob last put %s ago)", retention, n, err, retention+time.Hour+time.Minute)
	}
	wantMissing(t, b.Blobs, old)
	wantBlob(t, b.Blobs, kept, []byte("old but put again since"))
	wantBlob(t, b.Blobs, fresh, []byte("new"))
	if n, err := b.Blobs.PurgeBlobs(t.Context(), clock.Now().Add(-retention)); err != nil || n != 0 {
		t.Fatalf("a second PurgeBlobs = %d, %v; want 0", n, err)
	}
	// A purged blob can be put again.
	putBlob(t, b.Blobs, []byte("old and unreferenced"))
	wantBlob(t, b.Blobs, old, []byte("old and unreferenced"))
}

func blobPeer(t *testing.T, open BlobOpener, _ Features) {
	b, _ := blobFixture(t, open)
	payload := []byte("written by one replica, read by another")
	key := putBlob(t, b.Blobs, payload)
	wantBlob(t, b.Peer(t), key, payload)
}

func blobPutRacesPurge(t *testing.T, open BlobOpener, _ Features) {
	b, clock := blobFixture(t, open)
	peer := b.Peer(t)
	const retention = time.Hour
	for round := range 50 {
		payload := []byte("round " + strings.Repeat("x", round))
		key := putBlob(t, b.Blobs, payload)
		clock.Advance(retention + time.Minute)
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			putErr   error
			purgeErr error
		)
		wg.Go(func() {
			<-start
			_, putErr = b.Blobs.PutBlob(t.Context(), payload)
		})
		wg.Go(func() {
			<-start
			_, purgeErr = peer.PurgeBlobs(t.Context(), clock.Now().Add(-retention))
		})
		close(start)
		wg.Wait()
		if putErr != nil || purgeErr != nil {
			t.Fatalf("round %d: PutBlob = %v, PurgeBlobs = %v; want both to succeed", round, putErr, purgeErr)
		}
		// The put returned: whichever came first, the blob is there.
		wantBlob(t, b.Blobs, key, payload)
	}
}

func blobTimeOnlyForward(t *testing.T, open BlobOpener, _ Features) {
	b, clock := blobFixture(t, open)
	key := putBlob(t, b.Blobs, []byte("put by a replica whose clock is ahead"))
	put := clock.Now()
	clock.Advance(-time.Hour)
	putBlob(t, b.Blobs, []byte("put by a replica whose clock is ahead"))
	wantStat(t, b.Blobs, key, int64(len("put by a replica whose clock is ahead")), put)
}
