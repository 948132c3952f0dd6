package broker

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// batchConnLimit is how many bytes may wait for the socket before a write
// blocks, which keeps the broker's TCP back-pressure (a blocked connection
// stops its publishers) instead of buffering without end.
const batchConnLimit = 256 << 10

// batchConn is a net.Conn whose writes are gathered by one goroutine: a
// Write appends to a buffer and returns, and the writer sends everything
// that accumulated while its previous write was in the kernel in one system
// call. amqp091-go flushes every frame group (a publish, an ack) with a write
// of its own while holding the connection's send lock, so without this each
// message costs the client a system call and the broker a socket read;
// under load, publishes and acknowledgements from many goroutines now share
// them. At low load a write is on the wire after one goroutine hand-off.
//
// A failed write closes the connection, so its reader fails and the
// connection shuts down as with any broken socket; the error is also
// returned by the next Write. A write the peer does not take within
// batchConnStall fails too. Close first writes what is waiting (the
// broker's close-ok, a TLS close alert), for at most batchConnLinger. Reads
// and deadlines go to the socket as they are; each read that returns bytes
// stamps the time, which proves the connection alive (Health).
type batchConn struct {
	net.Conn

	read atomic.Int64 // mono() of the last read that returned bytes

	mu      sync.Mutex
	pending []byte
	spare   []byte
	closing bool      // Close was called: write what is pending, then stop
	blocked int       // writes waiting for room
	err     error     // the first write failure
	wake    sync.Cond // signalled when pending grows, or on Close
	room    sync.Cond // signalled when pending was taken, or on failure
	done    chan struct{}
}

// batchConnLinger bounds how long Close spends writing what is waiting.
const batchConnLinger = time.Second

// batchConnStall bounds one write to the socket: a broker that reads
// nothing for that long (the peer stalled, or a resource alarm that
// outlasts it) fails the connection, which then reconnects. Without it a
// full buffer held every publisher of the connection, whatever their
// contexts said, and Close with them. A variable for the tests.
var batchConnStall = 30 * time.Second

func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c, done: make(chan struct{})}
	b.wake.L, b.room.L = &b.mu, &b.mu
	b.read.Store(int64(mono()))
	go b.loop()
	return b
}

// Read reads from the socket and stamps the time when bytes came.
func (b *batchConn) Read(p []byte) (int, error) {
	n, err := b.Conn.Read(p)
	if n > 0 {
		b.read.Store(int64(mono()))
	}
	return n, err
}

// lastRead returns mono() of the last read that returned bytes, or of the
// connection's creation.
func (b *batchConn) lastRead() time.Duration { return time.Duration(b.read.Load()) }

// Write queues p for the writer. It blocks only while batchConnLimit bytes
// wait already.
func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.err == nil && !b.closing && len(b.pending) > 0 && len(b.pending)+len(p) > batchConnLimit {
		b.blocked++
		b.room.Wait()
		b.blocked--
	}
	if b.closing {
		return 0, net.ErrClosed
	}
	if b.err != nil {
		return 0, b.err
	}
	b.pending = append(b.pending, p...)
	b.wake.Signal()
	return len(p), nil
}

func (b *batchConn) loop() {
	defer close(b.done)
	b.mu.Lock()
	for {
		for b.err == nil && !b.closing && len(b.pending) == 0 {
			b.wake.Wait()
		}
		if b.err != nil || len(b.pending) == 0 {
			// Failed, or closing with everything written.
			b.room.Broadcast()
			b.mu.Unlock()
			return
		}
		out := b.pending
		b.pending = b.spare[:0]
		b.room.Broadcast()
		if !b.closing {
			// Under b.mu, so that it never replaces Close's deadline.
			_ = b.Conn.SetWriteDeadline(time.Now().Add(batchConnStall))
		}
		b.mu.Unlock()
		_, err := b.Conn.Write(out)
		b.mu.Lock()
		// Pending now holds what spare held: out becomes the spare, unless
		// large messages grew it, which is not kept.
		b.spare = nil
		if cap(out) <= 2*batchConnLimit {
			b.spare = out[:0]
		}
		if err != nil {
			if b.err == nil {
				b.err = err
			}
			b.room.Broadcast()
			b.mu.Unlock()
			b.Conn.Close()
			return
		}
	}
}

// Close takes no more writes, lets the writer send what is waiting for at
// most batchConnLinger (a socket the peer no longer reads fails the write at
// that deadline), then closes the connection.
func (b *batchConn) Close() error {
	b.mu.Lock()
	b.closing = true
	_ = b.Conn.SetWriteDeadline(time.Now().Add(batchConnLinger))
	b.wake.Signal()
	b.room.Broadcast()
	b.mu.Unlock()
	<-b.done
	return b.Conn.Close()
}
