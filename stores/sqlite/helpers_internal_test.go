package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/acemq/acemq-flow/stores"
)

// openMigrated opens a migrated store on a new file under t.TempDir() and
// closes it when the test ends.
func openMigrated(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "acemq.db"), stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}
