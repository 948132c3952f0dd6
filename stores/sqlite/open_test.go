package sqlite_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/sqlite"
)

func TestOpenMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	path := filepath.Join(dir, "a.db")
	s, err := sqlite.Open(t.Context(), path, stores.Options{})
	if err == nil {
		s.Close()
		t.Fatalf("Open(%q) with no directory %q = nil error, want one naming the directory", path, dir)
	}
	for _, want := range []string{dir, "does not exist", "create it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %q, want it to say %q", path, err, want)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Open(%q) left %q behind (stat: %v), want nothing created", path, dir, err)
	}
}
