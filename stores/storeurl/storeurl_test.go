package storeurl_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func TestBackend(t *testing.T) {
	cases := []struct {
		name, url, want string
	}{
		{"postgres scheme selects postgres", "postgres://u@h/db", "postgres"},
		{"postgresql scheme selects postgres", "postgresql://u@h/db", "postgres"},
		{"sqlite with a relative path selects sqlite", "sqlite:flow.db", "sqlite"},
		{"sqlite with an absolute path selects sqlite", "sqlite:///var/lib/flow.db", "sqlite"},
		{"memory selects memory", "memory:", "memory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := storeurl.Backend(tc.url)
			if err != nil || got != tc.want {
				t.Fatalf("Backend(%q) = %q, %v; want %q", tc.url, got, err, tc.want)
			}
		})
	}
}

func TestBackendRefusesUnknownSchemesWithoutThePassword(t *testing.T) {
	for _, u := range []string{"mysql://root:hunter2@db/x", "hunter2", "redis://:hunter2@h"} {
		_, err := storeurl.Backend(u)
		if err == nil {
			t.Fatalf("Backend(%q): nil error", u)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("Backend(%q) error shows the password: %v", u, err)
		}
	}
}

func TestSQLitePath(t *testing.T) {
	cases := map[string]string{
		"sqlite:flow.db":             "flow.db",
		"sqlite:./data/flow.db":      "./data/flow.db",
		"sqlite:/var/lib/flow.db":    "/var/lib/flow.db",
		"sqlite:///var/lib/flow.db":  "/var/lib/flow.db",
		"sqlite3:/var/lib/flow.db":   "/var/lib/flow.db",
		"sqlite://relative/flow.db":  "relative/flow.db",
		"sqlite:C:/acemq/flow.db":    "C:/acemq/flow.db",
		"sqlite:/tmp/with space.db":  "/tmp/with space.db",
		"sqlite:/tmp/unicode-é.db":   "/tmp/unicode-é.db",
		"sqlite:/tmp/x.db#fragment?": "/tmp/x.db#fragment?",
	}
	for in, want := range cases {
		if got := storeurl.SQLitePath(in); got != want {
			t.Errorf("SQLitePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOpenPicksTheBackend(t *testing.T) {
	ctx := t.Context()
	s, err := storeurl.Open(ctx, "memory:", stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if c, err := s.TryClaim(ctx, stores.ClaimRequest{Key: "k"}); err != nil || c.State != stores.Claimed {
		t.Fatalf("memory: TryClaim = %v, %v", c.State, err)
	}

	path := t.TempDir() + "/flow.db"
	s2, err := storeurl.Open(ctx, "sqlite:"+path, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.CheckSchema(ctx); err == nil {
		t.Fatal("sqlite: CheckSchema on a new file: nil error; Open must not create tables")
	}
	if err := s2.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := s2.TryClaim(ctx, stores.ClaimRequest{Key: "k"}); err != nil || c.State != stores.Claimed {
		t.Fatalf("sqlite: TryClaim = %v, %v", c.State, err)
	}

	if _, err := storeurl.Open(ctx, "sqlite::memory:", stores.Options{}); err == nil {
		t.Error("Open(sqlite::memory:): nil error, want a refusal pointing at memory:")
	}
}

func TestWriteMigrationsPrintsWhatMigrateRuns(t *testing.T) {
	for _, u := range []string{"postgres://h/db", "sqlite:x.db"} {
		ms, err := storeurl.Migrations(u)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) < 3 {
			t.Fatalf("Migrations(%s) = %d files, want the migrations table, idempotency and outbox at least", u, len(ms))
		}
		var buf bytes.Buffer
		if err := storeurl.WriteMigrations(&buf, u); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		for i, m := range ms {
			if m.Version != i {
				t.Errorf("%s: migration %d has version %d", u, i, m.Version)
			}
			if !strings.Contains(out, "-- "+m.Name) || !strings.Contains(out, m.SQL) {
				t.Errorf("%s: printed SQL lacks %s verbatim", u, m.Name)
			}
			if !strings.Contains(m.SQL, "acemq_migrations") {
				t.Errorf("%s: %s does not record itself in acemq_migrations", u, m.Name)
			}
		}
		for _, table := range []string{"acemq_idempotency", "acemq_outbox"} {
			if !strings.Contains(out, "CREATE TABLE IF NOT EXISTS "+table) {
				t.Errorf("%s: printed SQL does not create %s", u, table)
			}
		}
	}
	var buf bytes.Buffer
	if err := storeurl.WriteMigrations(&buf, "memory:"); err != nil || !strings.Contains(buf.String(), "no tables") {
		t.Errorf("WriteMigrations(memory:) = %q, %v", buf.String(), err)
	}
}
