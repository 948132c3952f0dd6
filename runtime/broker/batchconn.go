package broker

import (
	"net"
	"sync"
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
// returned by the next Write. Reads and deadlines go to the socket as they
// are.
type batchConn struct {
	net.Conn

	mu      sync.Mutex
	pending []byte
	spare   []byte
	err     error     // the first write failure, or net.ErrClosed after Close
	wake    sync.Cond // signalled when pending grows, or on Close
	room    sync.Cond // signalled when pending was taken, or on failure
	done    chan struct{}
}

func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c, done: make(chan struct{})}
	b.wake.L, b.room.L = &b.mu, &b.mu
	go b.loop()
	return b
}

// Write queues p for the writer. It blocks only while batchConnLimit bytes
// wait already.
func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.err == nil && len(b.pending) > 0 && len(b.pending)+len(p) > batchConnLimit {
		b.room.Wait()
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
		for b.err == nil && len(b.pending) == 0 {
			b.wake.Wait()
		}
		if b.err != nil {
			b.mu.Unlock()
			return
		}
		out := b.pending
		b.pending = b.spare[:0]
		b.room.Broadcast()
		b.mu.Unlock()
		_, err := b.Conn.Write(out)
		b.mu.Lock()
		b.spare = out[:0]
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

// Close stops the writer, dropping what it had not written (as closing a
// socket does), and closes the connection.
func (b *batchConn) Close() error {
	b.mu.Lock()
	if b.err == nil {
		b.err = net.ErrClosed
	}
	b.wake.Signal()
	b.room.Broadcast()
	b.mu.Unlock()
	err := b.Conn.Close()
	<-b.done
	return err
}
