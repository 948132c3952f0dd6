package testenv

import (
	"bytes"
	"net"
	"os"
	"testing"
)

// Golden compares got with the golden file, or rewrites the file when
// update is set (each package's `go test -update`).
func Golden(t testing.TB, file string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("golden file %s: %v (run go test -update to create it)", file, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run go test -update and review the diff):\n got:\n%s\nwant:\n%s", file, got, want)
	}
}

// FreeAddr returns a loopback address with a port nothing listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
