package proto

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

func TestTierHoldsTheSizeAskedFor(t *testing.T) {
	for _, c := range []struct{ size, tier int }{
		{0, 0}, {1, 0}, {256, 0}, {257, 1}, {512, 1}, {513, 2}, {16 << 10, 6}, {1 << 20, 12}, {1<<20 + 1, 13},
	} {
		if got := tier(c.size); got != c.tier {
			t.Errorf("tier(%d) = %d, want %d", c.size, got, c.tier)
		}
	}
}

func TestDirtyPoolReusesWhatFitsAndDropsTheRest(t *testing.T) {
	p := &dirtyPool{}
	b := p.Get(3000)
	if len(*b) != 3000 || cap(*b) != 4096 {
		t.Fatalf("Get(3000) gave len %d cap %d, want 3000 and 4096", len(*b), cap(*b))
	}
	copy(*b, "kept")
	p.Put(b)
	// sync.Pool may drop what it holds at any time; when it hands the
	// buffer back, it comes at the new length, bytes as they were.
	again := p.Get(2500)
	if len(*again) != 2500 || cap(*again) != 4096 {
		t.Fatalf("Get(2500) gave len %d cap %d, want 2500 and 4096", len(*again), cap(*again))
	}
	big := p.Get(2 << 20)
	if len(*big) != 2<<20 {
		t.Fatalf("Get(2 MiB) gave len %d", len(*big))
	}
	p.Put(big) // above the largest tier: left to the collector
	odd := make([]byte, 100, 300)
	p.Put(&odd) // not a tier's capacity: not kept, or a Get(400) could get it
	for range 100 {
		if got := p.Get(400); cap(*got) != 512 {
			t.Fatalf("Get(400) after putting a buffer of cap 300 gave cap %d, want 512", cap(*got))
		}
	}
}

// The codec writes what gRPC's registered protobuf codec writes, and reads
// it back, for messages above and below gRPC's pooling threshold.
func TestCodecMatchesGRPCsProtobufCodec(t *testing.T) {
	grpcs := encoding.GetCodecV2("proto")
	for _, size := range []int{10, 1024, 64 << 10} {
		in := &CallBatch{Calls: []*HandleRequest{{CallId: 7, Handler: "reserve", Payload: bytes.Repeat([]byte("x"), size),
			Envelope: &Envelope{MessageId: "m1", Headers: map[string]string{"k": "v"}}}}, Cancel: []uint64{3}}
		ours, err := Codec.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := grpcs.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours.Materialize(), theirs.Materialize()) {
			t.Fatalf("payload %d bytes: the codec's bytes differ from gRPC's", size)
		}
		out := &CallBatch{}
		if err := Codec.Unmarshal(ours, out); err != nil {
			t.Fatal(err)
		}
		ours.Free()
		theirs.Free()
		// The decoded message owns its bytes: the pool may hand the
		// buffer out again.
		scribble := Buffers.Get(size + 100)
		for i := range *scribble {
			(*scribble)[i] = 'y'
		}
		if !proto.Equal(in, out) {
			t.Fatalf("payload %d bytes: decoded %v, want %v", size, out, in)
		}
		Buffers.Put(scribble)
	}
	if _, err := Codec.Marshal("not a message"); err == nil {
		t.Fatal("Marshal of a string succeeded")
	}
	if err := Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer{1}}, new(int)); err == nil {
		t.Fatal("Unmarshal into an int succeeded")
	}
}
