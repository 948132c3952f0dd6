package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func TestMigratePrintsSQL(t *testing.T) {
	cases := []struct {
		name    string
		store   string
		want    []string
		wantNot string
	}{
		{"sqlite prints every file with its name", "sqlite:" + filepath.Join(t.TempDir(), "never-created.db"),
			[]string{"-- 0000_migrations.sql (sqlite)", "-- 0002_outbox.sql (sqlite)", "CREATE TABLE IF NOT EXISTS acemq_outbox", "BLOB"}, ""},
		{"postgres prints without connecting, and never the password", "postgres://acemq:s3cret@127.0.0.1:1/flows",
			[]string{"-- 0001_idempotency.sql (postgres)", "CREATE TABLE IF NOT EXISTS acemq_idempotency", "bigserial"}, "s3cret"},
		{"memory has no tables", "memory:", []string{"-- the memory store has no tables"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := cli(t, "migrate", "--print", "--store", tc.store)
			if code != 0 {
				t.Fatalf("acemq-flow migrate --print --store %s: exit %d, want 0\nstderr: %s", tc.store, code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("migrate --print --store %s: output lacks %q:\n%s", tc.store, w, out)
				}
			}
			if tc.wantNot != "" && strings.Contains(out+errOut, tc.wantNot) {
				t.Errorf("migrate --print --store %s: output contains %q", tc.store, tc.wantNot)
			}
		})
	}
	t.Run("the printed SQL is what the store runs", func(t *testing.T) {
		out, _, _ := cli(t, "migrate", "--print", "--store", "sqlite:x.db")
		ms, err := storeurl.Migrations("sqlite:x.db")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if !strings.Contains(out, m.SQL) {
				t.Errorf("migrate --print lacks the text of %s", m.Name)
			}
		}
	})
}

func TestMigrateAppliesToSQLiteFile(t *testing.T) {
	store := "sqlite:" + filepath.Join(t.TempDir(), "acemq.db")
	// Before: the tables are missing and commands that need them say so.
	_, errOut, code := cli(t, "outbox", "list", "--store", store)
	if code != 1 || !strings.Contains(errOut, "acemq-flow migrate") {
		t.Fatalf("outbox list before migrate: exit %d, stderr %q; want exit 1 naming `acemq-flow migrate`", code, errOut)
	}
	for i := range 2 { // applying again changes nothing
		out, errOut, code := cli(t, "migrate", "--store", store)
		if code != 0 || !strings.Contains(out, "is up to date") {
			t.Fatalf("migrate #%d --store %s: exit %d\nstdout: %s\nstderr: %s", i+1, store, code, out, errOut)
		}
	}
	set, err := storeurl.Open(t.Context(), store, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if err := set.CheckSchema(t.Context()); err != nil {
		t.Errorf("CheckSchema after migrate: %v", err)
	}
}

func TestMigrateUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"a store URL without a scheme", []string{"migrate", "--store", "root@db/acemq"}},
		{"an unknown scheme", []string{"migrate", "--store", "mysql://root:pw@db/acemq"}},
		{"an argument", []string{"migrate", "extra"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := cli(t, tc.args...)
			if code != 2 {
				t.Errorf("acemq-flow %s: exit %d, want 2\nstderr: %s", strings.Join(tc.args, " "), code, errOut)
			}
			if strings.Contains(errOut, "pw@") {
				t.Errorf("acemq-flow %s: stderr shows the password: %s", strings.Join(tc.args, " "), errOut)
			}
		})
	}
}
