package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

// run --blobs sqlite:PATH without --create-schema opens only a SQLite file
// that is there: one that is not is refused, naming it and
// --create-schema, and nothing is created; with --create-schema the file
// is made with its table.
func TestRunBlobsSQLiteCreatesNothingWithoutCreateSchema(t *testing.T) {
	dir := t.TempDir()
	flow := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(flow, []byte("version: acemq.flow/v1\nname: empty\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "blobs.db")
	_, errOut, code := cli(t, "run", "--store", "memory:", "--amqp", "amqp://127.0.0.1:1/", "--admin", "", "--blobs", "sqlite:"+missing, flow)
	if code != 1 || !strings.Contains(errOut, "sqlite:"+missing+" does not exist") || !strings.Contains(errOut, "--create-schema") {
		t.Errorf("run --blobs sqlite:%s = %d, %q; want exit 1 naming the file and --create-schema", missing, code, errOut)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatalf("run --blobs sqlite:%s failed and left the file behind; it must create nothing without --create-schema", missing)
	}
	// With --create-schema, run makes the file and goes on to the broker,
	// which it waits for: it is stopped once the file is there.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var errb lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"run", "--store", "memory:", "--amqp", "amqp://127.0.0.1:1/", "--admin", "", "--blobs", "sqlite:" + missing, "--create-schema", flow}, strings.NewReader(""), io.Discard, &errb)
	}()
	testenv.Eventually(t, 30*time.Second, func() error {
		select {
		case c := <-exited:
			t.Fatalf("run --blobs sqlite:%s --create-schema exited %d before making the file: %s", missing, c, errb.String())
		default:
		}
		if _, err := os.Stat(missing); err != nil {
			return testenv.Errorf("run --blobs sqlite:%s --create-schema has made no file yet: %v", missing, err)
		}
		return nil
	})
	cancel()
	<-exited
	if strings.Contains(errb.String(), "does not exist") {
		t.Errorf("run --blobs sqlite:%s --create-schema refused the file: %s", missing, errb.String())
	}
}
