package core

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// LoadMigrations reads every NNNN_name.sql file of dir in fsys, in version
// order.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a version number and an underscore", name)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", ms[i-1].Name, ms[i].Name, ms[i].Version)
		}
	}
	return ms, nil
}

// SchemaError reports that a store's tables are missing (Have < 0) or
// behind the newest embedded migration (Have < Want).
type SchemaError struct {
	Backend string
	Have    int
	Want    int
}

// Error tells the operator what to run.
func (e *SchemaError) Error() string {
	if e.Have < 0 {
		return fmt.Sprintf("%s store: tables not created; run `acemq-flow migrate` (or `run --create-schema` in development)", e.Backend)
	}
	return fmt.Sprintf("%s store: schema at version %d, want %d; run `acemq-flow migrate`", e.Backend, e.Have, e.Want)
}
