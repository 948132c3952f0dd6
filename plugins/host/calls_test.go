//go:build unix && !aix

package host

import (
	"bytes"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// The host uses the call socket only when the first frame waiting there is
// the plugin's empty ResultBatch; anything else (nothing yet, a part of a
// frame, bytes that are not one) leaves calls on gRPC, at once, without
// reading what a length prefix announces.
func TestOpenCallSocketTakesOnlyTheHello(t *testing.T) {
	tests := []struct {
		name    string
		written []byte
		want    bool
	}{
		{"an empty ResultBatch", []byte{0, 0, 0, 0}, true},
		{"nothing", nil, false},
		{"part of a frame", []byte{0, 0}, false},
		{"a length announcing a gigabyte", []byte{0x40, 0, 0, 0, 1, 2, 3}, false},
		{"a batch that is not empty", append([]byte{0, 0, 0, 2}, 0x0a, 0x00), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hostEnd, pluginEnd, err := callSocketPair()
			if err != nil {
				t.Fatal(err)
			}
			defer pluginEnd.Close()
			if len(tc.written) > 0 {
				if _, err := pluginEnd.Write(tc.written); err != nil {
					t.Fatal(err)
				}
			}
			f := openCallSocket(hostEnd)
			if got := f != nil; got != tc.want {
				t.Fatalf("openCallSocket after the plugin wrote % x: served = %v, want %v", tc.written, got, tc.want)
			}
			if f == nil {
				// The host's end is closed: the plugin's reads end.
				if n, err := pluginEnd.Read(make([]byte, 1)); n != 0 || err == nil {
					t.Fatalf("read on the plugin's end after a refusal = %d, %v; want the end of the socket", n, err)
				}
				return
			}
			defer f.Close()
			// The hello was taken: the next frame is the plugin's first answer.
			plugin := proto.NewFrames(mustFileConn(t, pluginEnd))
			want := &proto.ResultBatch{Results: []*proto.HandleResponse{{CallId: 7}}}
			go func() { _ = plugin.Write(want) }()
			var got proto.ResultBatch
			if err := f.Read(&got); err != nil || got.GetResults()[0].GetCallId() != 7 {
				t.Fatalf("first frame after the hello = %v, %v; want call 7's answer", &got, err)
			}
		})
	}
}

// The SDK leaves alone a descriptor that is not a Unix stream socket: the
// variable may name a number the process has since reused.
func TestFramesFromFDLeavesOtherFilesAlone(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "not-a-socket")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := proto.FramesFromFD(itoa(int(f.Fd()))); err == nil || !bytes.Contains([]byte(err.Error()), []byte("not a socket")) {
		t.Fatalf("FramesFromFD(a regular file) = %v, want an error saying it is not a socket", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatalf("the file's descriptor was closed: %v", err)
	}
	if _, err := f.WriteString("still open"); err != nil {
		t.Fatalf("write to the file after FramesFromFD refused it: %v", err)
	}
}

func mustFileConn(t *testing.T, f *os.File) net.Conn {
	t.Helper()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return c
}

func itoa(n int) string { return strconv.Itoa(n) }
