package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// bigJSON is a JSON document of about n bytes.
func bigJSON(n int) string { return `{"blob":"` + strings.Repeat("x", n) + `"}` }

// send --blobs puts a payload above the threshold in the runtime's blob
// store, which must exist: a SQLite file or a directory that is not there,
// or a database without the blob table, is not the runtime's, and send
// stops naming it, creating nothing and sending nothing; memory: is not a
// store a runtime can read.
func TestSendBlobsMustBeTheRuntimes(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	data := "@" + filepath.Join(dir, "big.json")
	if err := os.WriteFile(data[1:], []byte(bigJSON(70<<10)), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		blobs string
		code  int
		want  []string
	}{
		{"a SQLite file that does not exist", "sqlite:" + missing, 1, []string{"sqlite:" + missing, "does not exist", "--blobs the runtime uses"}},
		{"a SQLite file without the blob table", "sqlite:" + empty, 1, []string{"sqlite:" + empty, "no acemq_blobs table", "--blobs the runtime uses"}},
		{"a directory that does not exist", "file:" + filepath.Join(dir, "none"), 1, []string{"file:" + filepath.Join(dir, "none"), "does not exist"}},
		{"the memory store", "memory:", 2, []string{"memory:", "no runtime can read", "file:DIR, sqlite:PATH or postgres://"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := cli(t, "send", "--amqp", "amqp://127.0.0.1:1/", "--exchange", "", "--routing-key", "q", "--data", data, "--blobs", tc.blobs)
			if code != tc.code || strings.Contains(errOut, "sent message") {
				t.Fatalf("send --blobs %s: exit %d, stderr %q; want exit %d, nothing sent", tc.blobs, code, errOut, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("send --blobs %s says %q; want it to say %q", tc.blobs, errOut, w)
				}
			}
		})
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("send --blobs sqlite:%s created the file; it must open only the runtime's store", missing)
	}
	if _, err := os.Stat(filepath.Join(dir, "none")); err == nil {
		t.Errorf("send --blobs file: created the directory; it must open only the runtime's store")
	}
}

// send --blobs sqlite:PATH with the runtime's SQLite file puts the payload
// there and sends its reference.
func TestSendBlobsToTheRuntimesSQLiteFile(t *testing.T) {
	url := testenv.VHost(t)
	st := storetest.OpenSQLite(t, stores.Options{})
	ch := testenv.ConfirmedChannel(t, url)
	if _, err := ch.QueueDeclare("sb.in", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	payload := bigJSON(70 << 10)
	_, errOut, code := cli(t, "send", "--amqp", url, "--exchange", "", "--routing-key", "sb.in", "--data", payload, "--blobs", "sqlite:"+st.Path())
	if code != 0 {
		t.Fatalf("send --blobs sqlite: exit %d, stderr %s", code, errOut)
	}
	var got []byte
	testenv.Eventually(t, 10*time.Second, func() error {
		m, ok, err := ch.Get("sb.in", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return testenv.Errorf("sb.in is empty")
		}
		if m.Headers[decide.HeaderClaimCheck] != stores.BlobKey([]byte(payload)) {
			t.Fatalf("sb.in holds claim check %v and %d bytes; want the payload's reference", m.Headers[decide.HeaderClaimCheck], len(m.Body))
		}
		got = m.Body
		return nil
	})
	body, err := st.GetBlob(t.Context(), stores.BlobKey([]byte(payload)))
	if err != nil || !bytes.Equal(body, []byte(payload)) {
		t.Fatalf("the SQLite blob store holds %d bytes under the payload's key (%v); want the payload (the message carried %s)", len(body), err, got)
	}
}

// The --blobs help of run, send and purge names every scheme a runtime
// accepts.
func TestBlobsHelpNamesEveryScheme(t *testing.T) {
	for _, c := range []string{"run", "send", "purge"} {
		out, _, code := cli(t, c, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d", c, code)
		}
		i := strings.Index(out, "--blobs string")
		if i < 0 {
			t.Fatalf("%s --help has no --blobs", c)
		}
		line, _, _ := strings.Cut(out[i:], "\n")
		for _, s := range []string{"file:DIR", "sqlite:PATH", "postgres://"} {
			if !strings.Contains(line, s) {
				t.Errorf("%s --help: %q does not name %s", c, line, s)
			}
		}
	}
}
