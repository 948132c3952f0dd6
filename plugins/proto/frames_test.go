package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

func TestFramesRoundTrip(t *testing.T) {
	a, b := net.Pipe()
	w, r := NewFrames(a), NewFrames(b)
	defer w.Close()
	defer r.Close()
	sent := []*CallBatch{
		{Calls: []*HandleRequest{{CallId: 1, Handler: "echo", Payload: bytes.Repeat([]byte("x"), 1024),
			Envelope: &Envelope{MessageId: "m-1", Headers: map[string]string{"x-acemq-route": "a,b"}}}}},
		{}, // an empty batch is a frame of length 0
		{Cancel: []uint64{7, 9}},
		{Calls: []*HandleRequest{{CallId: 2, Payload: bytes.Repeat([]byte("y"), 200<<10)}}}, // larger than the read buffer
	}
	go func() {
		for _, m := range sent {
			if err := w.Write(m); err != nil {
				t.Errorf("Write: %v", err)
				return
			}
		}
		w.Close()
	}()
	for i, want := range sent {
		got := &CallBatch{}
		if err := r.Read(got); err != nil {
			t.Fatalf("Read %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("Read %d = %v, want %v", i, got, want)
		}
	}
	// The writer closed between frames: a clean end.
	if err := r.Read(&CallBatch{}); !errors.Is(err, io.EOF) {
		t.Fatalf("Read after the peer closed = %v, want io.EOF", err)
	}
}

// A read returns a message of its own: the buffer the frame was read into
// is reused for the next one.
func TestFramesReadDoesNotAlias(t *testing.T) {
	a, b := net.Pipe()
	w, r := NewFrames(a), NewFrames(b)
	defer r.Close()
	go func() {
		_ = w.Write(&ResultBatch{Results: []*HandleResponse{{CallId: 1, Outcome: &HandleResponse_Output{Output: &Output{Payload: []byte("first")}}}}})
		_ = w.Write(&ResultBatch{Results: []*HandleResponse{{CallId: 2, Outcome: &HandleResponse_Output{Output: &Output{Payload: []byte("later")}}}}})
		w.Close()
	}()
	first, second := &ResultBatch{}, &ResultBatch{}
	if err := r.Read(first); err != nil {
		t.Fatal(err)
	}
	if err := r.Read(second); err != nil {
		t.Fatal(err)
	}
	if got := string(first.GetResults()[0].GetOutput().GetPayload()); got != "first" {
		t.Fatalf("the first message's payload reads %q after a second read, want first", got)
	}
}

func TestFramesRejectsBadInput(t *testing.T) {
	// length is a frame's length prefix alone.
	length := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	tests := []struct {
		name string
		in   []byte
		want string // in the error; empty: want io.ErrUnexpectedEOF
	}{
		{name: "a length over the limit", in: length(MaxFrame + 1), want: "over its limit"},
		{name: "a frame cut short", in: append(length(10), 1, 2, 3)},
		{name: "a length cut short", in: []byte{0, 0}},
		{name: "bytes that are not the message", in: append(length(3), 0xff, 0xff, 0xff), want: "proto"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			r := NewFrames(b)
			defer r.Close()
			go func() {
				_, _ = a.Write(tc.in)
				a.Close()
			}()
			err := r.Read(&CallBatch{})
			if tc.want == "" {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("Read = %v, want io.ErrUnexpectedEOF", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestFramesFromFDRefusesNonDescriptors(t *testing.T) {
	for _, v := range []string{"", "x", "-1", "2"} {
		if _, err := FramesFromFD(v); err == nil || !strings.Contains(err.Error(), CallsFDEnv) {
			t.Errorf("FramesFromFD(%q) = %v, want an error naming %s", v, err, CallsFDEnv)
		}
	}
}
