package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/acemq/acemq-flow/stores/internal/core"
)

// OpenTest opens a migrated store on a new file under t.TempDir() and closes
// it in t.Cleanup. It is for tests in any package that need a real SQLite
// store.
func OpenTest(t testing.TB, opts core.Options) *Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "acemq.db")
	s, err := Open(t.Context(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }
