// Package storeurl opens the store a store URL names. It is the one package
// that imports every backend (postgres, sqlite, memory), so that package
// stores, which they import, never has to; a program that needs one backend
// only may import that backend instead.
//
//	postgres://user@host:5432/db?sslmode=verify-full  stores/postgres
//	sqlite:/var/lib/acemq/flow.db                     stores/sqlite
//	memory:                                           stores/memory
package storeurl

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/stores/sqlite"
)

// Backend names the store a URL selects: "postgres", "sqlite" or "memory".
func Backend(storeURL string) (string, error) {
	scheme, _, ok := strings.Cut(storeURL, ":")
	if !ok {
		// Not echoed: without a scheme there is no telling which part is a
		// password.
		return "", fmt.Errorf("store URL has no scheme; want postgres://…, sqlite:PATH or memory:")
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return "postgres", nil
	case "sqlite", "sqlite3":
		return "sqlite", nil
	case "memory":
		return "memory", nil
	}
	// The URL itself is not echoed: with an unknown scheme there is no
	// telling which part is a password.
	return "", fmt.Errorf("store URL has the unknown scheme %q; want postgres://…, sqlite:PATH or memory:", scheme)
}

// Open connects to the store storeURL names:
//
//   - postgres://user@host:5432/db?sslmode=verify-full (or postgresql://): a
//     pgx connection pool; any query parameter pgx accepts, including
//     search_path, pool_max_conns and lock_timeout, passes through.
//   - sqlite:PATH (sqlite:/var/lib/acemq/flow.db, sqlite:flow.db,
//     sqlite:///abs/path.db): one SQLite file, created if missing.
//   - memory: an empty in-process store, for tests.
//
// Open does not create tables; see stores.Set. Errors never contain a
// password.
func Open(ctx context.Context, storeURL string, opts stores.Options) (stores.Set, error) {
	backend, err := Backend(storeURL)
	if err != nil {
		return nil, err
	}
	switch backend {
	case "postgres":
		return postgres.Open(ctx, storeURL, opts)
	case "sqlite":
		return sqlite.Open(ctx, SQLitePath(storeURL), opts)
	default:
		return memory.Open(opts)
	}
}

// SQLitePath returns the file path of a sqlite: URL.
func SQLitePath(storeURL string) string {
	_, p, _ := strings.Cut(storeURL, ":")
	p = strings.TrimPrefix(p, "//") // sqlite:///abs → /abs, sqlite://rel → rel
	return p
}

// Migrations returns the embedded migrations of the backend storeURL
// selects (memory has none), without connecting.
func Migrations(storeURL string) ([]stores.Migration, error) {
	backend, err := Backend(storeURL)
	if err != nil {
		return nil, err
	}
	switch backend {
	case "postgres":
		return postgres.Migrations()
	case "sqlite":
		return sqlite.Migrations()
	}
	return nil, nil
}

// WriteMigrations writes the SQL of the backend storeURL selects to w, each
// file preceded by a "-- name" line: what `acemq-flow migrate --print`
// prints, and exactly what Migrate runs.
func WriteMigrations(w io.Writer, storeURL string) error {
	ms, err := Migrations(storeURL)
	if err != nil {
		return err
	}
	backend, _ := Backend(storeURL)
	if len(ms) == 0 {
		_, err := fmt.Fprintf(w, "-- the %s store has no tables\n", backend)
		return err
	}
	for i, m := range ms {
		sep := "\n"
		if i == 0 {
			sep = ""
		}
		if _, err := fmt.Fprintf(w, "%s-- %s (%s)\n%s", sep, m.Name, backend, m.SQL); err != nil {
			return err
		}
		if !strings.HasSuffix(m.SQL, "\n") {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
	}
	return nil
}
