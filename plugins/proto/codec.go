package proto

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Buffers is the buffer pool of the plugin connection's transport and
// codec, on both of its ends: powers of two from 256 bytes to 1 MiB, not
// cleared on reuse. gRPC's default pool clears the whole of every buffer
// it hands out, which on the call stream (a 16 KiB buffer for a few
// calls, several times per batch and side) cost about as much as decoding
// the calls. gRPC fills a buffer before reading it and does not read a
// freed one, so no message sees another's bytes.
var Buffers mem.BufferPool = &dirtyPool{}

// Codec is gRPC's protobuf codec with its buffers from Buffers: the same
// wire format. It is forced on the plugin's server and on the host's calls
// rather than registered, so that other gRPC users in the same process
// keep the default.
var Codec = codec{}

type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("acemq-flow plugin codec: cannot marshal %T, it is not a protobuf message", v)
	}
	size := proto.Size(m)
	// The size was just computed: the marshal may reuse it.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	buf := Buffers.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		Buffers.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, Buffers)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("acemq-flow plugin codec: cannot unmarshal into %T, it is not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(Buffers)
	defer buf.Free()
	// Unmarshal copies what it keeps (bytes fields included), so the
	// buffer can go back to the pool once it returns.
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// dirtyPool keeps buffers in tiers of powers of two; a size above the
// largest tier is allocated and left to the garbage collector.
type dirtyPool struct {
	tiers [dirtyTiers]sync.Pool
}

const (
	dirtyMinShift = 8  // 256 B
	dirtyTiers    = 13 // up to 1 MiB
)

// tier is the smallest tier whose buffers hold size bytes.
func tier(size int) int {
	if size <= 1<<dirtyMinShift {
		return 0
	}
	return bits.Len(uint(size-1)) - dirtyMinShift
}

func (p *dirtyPool) Get(size int) *[]byte {
	t := tier(size)
	if t >= dirtyTiers {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<(dirtyMinShift+t))
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if t := tier(c); t < dirtyTiers && c == 1<<(dirtyMinShift+t) {
		p.tiers[t].Put(b)
	}
}
