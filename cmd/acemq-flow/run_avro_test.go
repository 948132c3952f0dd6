package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run refuses memory: for flows with an Avro type, before it connects to
// anything: the schema ids messages carry must outlive the process.
func TestRunRefusesAMemoryRegistryForAvroTypes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(file, []byte(sendAvroFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, "run", file, "--store", "memory:", "--amqp", "amqp://127.0.0.1:1/", "--admin", "")
	if code != 1 || !strings.Contains(errOut, "Avro types") || !strings.Contains(errOut, "sqlite:PATH") {
		t.Fatalf("run (an Avro type, --store memory:): exit %d, stderr %q; want exit 1 naming Avro types and sqlite:PATH", code, errOut)
	}
}
