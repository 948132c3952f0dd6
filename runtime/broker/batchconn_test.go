package broker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// pipe returns a batchConn over one end of a synchronous pipe (a write
// waits until the other end reads it), the counter beneath it, and the other
// end.
func pipe(t *testing.T) (*batchConn, *countingConn, net.Conn) {
	t.Helper()
	a, peer := net.Pipe()
	cc := &countingConn{Conn: a}
	b := newBatchConn(cc)
	t.Cleanup(func() { b.Close(); peer.Close() })
	return b, cc, peer
}

// readN reads exactly n bytes from c, failing the test after a minute.
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return buf
}

func TestBatchConnGathersWritesMadeDuringAWrite(t *testing.T) {
	b, cc, peer := pipe(t)
	// The first write is taken by the writer and waits in the pipe until the
	// peer reads; the writes made meanwhile gather behind it.
	if _, err := b.Write([]byte("first;")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return cc.writes.Load() == 1 })
	var want bytes.Buffer
	want.WriteString("first;")
	for i := range 50 {
		p := fmt.Appendf(nil, "w%02d;", i)
		want.Write(p)
		if _, err := b.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	if got := readN(t, peer, want.Len()); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("the peer read %q, want %q", got, want.Bytes())
	}
	if n := cc.writes.Load(); n != 2 {
		t.Fatalf("51 writes reached the socket in %d writes, want 2 (the first, then the 50 made while it waited)", n)
	}
}

func TestBatchConnKeepsEachWriteWhole(t *testing.T) {
	b, _, peer := pipe(t)
	const writers, each = 8, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				// A record is its length, then that many copies of the
				// writer's letter.
				n := 10 + i%20
				rec := append([]byte{byte(n)}, bytes.Repeat([]byte{byte('a' + w)}, n)...)
				if _, err := b.Write(rec); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	seen := map[byte]int{}
	for range writers * each {
		head := readN(t, peer, 1)
		body := readN(t, peer, int(head[0]))
		if c := bytes.Trim(body, string(body[:1])); len(c) != 0 {
			t.Fatalf("a record's bytes are interleaved with another's: %q", body)
		}
		seen[body[0]]++
	}
	wg.Wait()
	for w := range writers {
		if seen[byte('a'+w)] != each {
			t.Errorf("writer %d: %d records arrived, want %d", w, seen[byte('a'+w)], each)
		}
	}
}

func TestBatchConnBlocksWritersWhenTheSocketDoesNotDrain(t *testing.T) {
	b, cc, peer := pipe(t)
	returned := blockedWrite(t, b, cc)
	readN(t, peer, 1+batchConnLimit)
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
	if got := readN(t, peer, 1); got[0] != 2 {
		t.Fatalf("last byte %d, want 2", got[0])
	}
}

func TestBatchConnFailedWriteClosesTheConnection(t *testing.T) {
	b, cc, peer := pipe(t)
	peer.Close()
	if _, err := b.Write([]byte("lost")); err != nil {
		t.Fatalf("first write: %v (it is queued; the failure shows on the next)", err)
	}
	// The reader of the connection sees it closed, as with a broken socket.
	waitFor(t, func() bool {
		_, err := cc.Read(make([]byte, 1))
		return errors.Is(err, io.ErrClosedPipe) || errors.Is(err, net.ErrClosed)
	})
	if _, err := b.Write([]byte("more")); err == nil {
		t.Fatal("a write after the socket failed returned nil")
	}
}

func TestBatchConnCloseReleasesABlockedWriter(t *testing.T) {
	b, cc, _ := pipe(t)
	returned := blockedWrite(t, b, cc)
	b.Close()
	select {
	case err := <-returned:
		if err == nil {
			t.Fatal("a write waiting when the connection closed returned nil")
		}
	case <-time.After(time.Minute):
		t.Fatal("Close left a writer waiting")
	}
	if _, err := b.Write([]byte{3}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close = %v, want net.ErrClosed", err)
	}
}

func TestBatchConnCloseWritesWhatWaits(t *testing.T) {
	b, cc, peer := pipe(t)
	if _, err := b.Write([]byte("close")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return cc.writes.Load() == 1 })
	if _, err := b.Write([]byte("-ok")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	if got := readN(t, peer, len("close-ok")); string(got) != "close-ok" {
		t.Fatalf("the peer read %q before the close, want %q", got, "close-ok")
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	peer.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after Close = %v, want EOF", err)
	}
}

// TestBatchConnNeverWritesIntoWhatItIsSending runs the writer through a
// large write (its buffer is then not kept) and checks that what it sends
// next is not overwritten by the writes made while it is being sent.
func TestBatchConnNeverWritesIntoWhatItIsSending(t *testing.T) {
	b, cc, peer := pipe(t)
	write := func(p []byte) {
		t.Helper()
		if _, err := b.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	write([]byte("s0"))
	readN(t, peer, 2) // the writer now keeps a spare buffer
	big := bytes.Repeat([]byte{'B'}, 3*batchConnLimit)
	write(big)
	waitFor(t, func() bool { return cc.writes.Load() == 2 })
	write([]byte("r1")) // gathers while the large write is under way
	readN(t, peer, len(big))
	waitFor(t, func() bool { return cc.writes.Load() == 3 }) // "r1" is being sent
	write([]byte("XX"))
	if got := readN(t, peer, 4); string(got) != "r1XX" {
		t.Fatalf("the peer read %q, want %q: a write landed in the buffer being sent", got, "r1XX")
	}
}

// blockedWrite gets the writer stuck in the pipe (its peer does not read),
// fills the buffer to its limit, and starts a write of the byte 2 that must
// wait for room; it returns once that write is waiting, with the channel its
// outcome arrives on.
func blockedWrite(t *testing.T, b *batchConn, cc *countingConn) <-chan error {
	t.Helper()
	if _, err := b.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return cc.writes.Load() == 1 })
	if _, err := b.Write(make([]byte, batchConnLimit)); err != nil {
		t.Fatal(err)
	}
	returned := make(chan error, 1)
	go func() {
		_, err := b.Write([]byte{2})
		returned <- err
	}()
	waitFor(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.blocked == 1
	})
	select {
	case err := <-returned:
		t.Fatalf("a write beyond %d waiting bytes returned (%v) instead of waiting for the socket", batchConnLimit, err)
	default:
	}
	return returned
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(end) {
			t.Fatal("condition not met within a minute")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatchConnAStalledPeerFailsTheConnection: a peer that reads nothing
// for batchConnStall fails the connection, releasing the writer waiting
// for room (and with it every publisher waiting behind it) with an error.
func TestBatchConnAStalledPeerFailsTheConnection(t *testing.T) {
	old := batchConnStall
	batchConnStall = 200 * time.Millisecond
	t.Cleanup(func() { batchConnStall = old })
	b, cc, _ := pipe(t) // the peer never reads
	returned := blockedWrite(t, b, cc)
	select {
	case err := <-returned:
		if err == nil {
			t.Fatal("a write waiting on a stalled peer returned nil")
		}
	case <-time.After(time.Minute):
		t.Fatal("a write waiting on a stalled peer was not released")
	}
	if _, err := b.Write([]byte{3}); err == nil {
		t.Fatal("a write after the stall returned nil")
	}
}
