package proto

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"

	"google.golang.org/protobuf/proto"
)

// CallsFDEnv names the environment variable through which the host offers a
// plugin process a private call socket: the number of an inherited file
// descriptor, one end of a socket pair whose other end only the host holds.
// A plugin that serves calls on it writes an empty ResultBatch there before
// it prints its handshake line; one that does not is called over the gRPC
// Calls stream. See plugins/README.md, "The call socket".
const CallsFDEnv = "ACEMQ_PLUGIN_CALLS_FD"

// MaxFrame bounds one frame on the call socket, as gRPC's message limit on
// the Calls stream does: a call or answer larger than the batch limit
// travels alone, and AMQP messages stay well below it.
const MaxFrame = math.MaxInt32

// Frames carries the Calls stream's messages over a socket pair instead of
// gRPC: each message is its protobuf encoding preceded by its length, 4
// bytes big-endian. The batches, call ids, cancels and answers are exactly
// those of the gRPC stream (plugin.proto); only the framing differs. A
// socket pair needs neither TLS nor HTTP/2: no other process can reach it.
//
// One goroutine may write and one read at a time; Frames does not lock.
type Frames struct {
	conn net.Conn
	r    *bufio.Reader
	rbuf []byte
	wbuf []byte
}

// NewFrames frames messages over conn.
func NewFrames(conn net.Conn) *Frames {
	return &Frames{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
}

// FramesFromFD opens the call socket the host passed as descriptor fd
// (CallsFDEnv's value).
func FramesFromFD(value string) (*Frames, error) {
	fd, err := strconv.Atoi(value)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q is not a descriptor number above 2", CallsFDEnv, value)
	}
	// The variable may have outlived the descriptor (a launcher that closes
	// what it inherits but passes the environment on), and the number may
	// now be another file of this process: leave anything that is not a
	// Unix stream socket alone.
	if err := checkCallFD(fd); err != nil {
		return nil, fmt.Errorf("%s=%d: %w", CallsFDEnv, fd, err)
	}
	f := os.NewFile(uintptr(fd), "acemq-calls")
	conn, err := net.FileConn(f)
	f.Close() // FileConn holds a duplicate
	if err != nil {
		return nil, fmt.Errorf("%s=%d: %w", CallsFDEnv, fd, err)
	}
	return NewFrames(conn), nil
}

// Write sends one message.
func (f *Frames) Write(m proto.Message) error {
	buf, err := proto.MarshalOptions{}.MarshalAppend(append(f.wbuf[:0], 0, 0, 0, 0), m)
	if err != nil {
		return err
	}
	n := len(buf) - 4
	if n > MaxFrame {
		return fmt.Errorf("a message of %d bytes exceeds the call socket's limit of %d", n, MaxFrame)
	}
	binary.BigEndian.PutUint32(buf, uint32(n))
	_, err = f.conn.Write(buf)
	if cap(buf) <= 4<<20 {
		f.wbuf = buf[:0]
	} else {
		f.wbuf = nil // not kept: one large message should not pin its buffer
	}
	return err
}

// Read receives one message into m. It returns io.EOF when the peer closed
// the socket between messages.
func (f *Frames) Read(m proto.Message) error {
	var head [4]byte
	if _, err := io.ReadFull(f.r, head[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > MaxFrame {
		return fmt.Errorf("the call socket announced a message of %d bytes, over its limit of %d", n, MaxFrame)
	}
	if cap(f.rbuf) < int(n) {
		f.rbuf = make([]byte, n)
	}
	buf := f.rbuf[:n]
	if _, err := io.ReadFull(f.r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if cap(f.rbuf) > 4<<20 {
		f.rbuf = nil
	}
	return proto.Unmarshal(buf, m)
}

// Close closes the socket, which ends the peer's reads with io.EOF and
// unblocks a Read or Write under way here.
func (f *Frames) Close() error { return f.conn.Close() }
