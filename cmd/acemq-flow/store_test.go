package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/test/testenv"
)

func TestRedactStore(t *testing.T) {
	cases := []struct {
		name, raw, want string
	}{
		{"a password that url.Parse accepts", "postgres://acemq:s3cret@db:5432/flows", "postgres://acemq:xxxxx@db:5432/flows"},
		{"a password holding #", "postgres://acemq:p#ssword@127.0.0.1:5432/test", "postgres://acemq:xxxxx@127.0.0.1:5432/test"},
		{"a password holding a bad %-escape", "postgres://acemq:p%zzword@127.0.0.1:5432/test", "postgres://acemq:xxxxx@127.0.0.1:5432/test"},
		{"a password holding /", "postgres://acemq:pa/ss@127.0.0.1:5432/test", "postgres://acemq:xxxxx@127.0.0.1:5432/test"},
		{"a password holding a space", "postgres://acemq:secret pw@127.0.0.1:5432/test", "postgres://acemq:xxxxx@127.0.0.1:5432/test"},
		{"a password holding @", "postgres://acemq:p@ss@db/flows", "postgres://acemq:xxxxx@db/flows"},
		{"a password as a query parameter", "postgres://acemq@db/flows?sslmode=disable&password=s3cret", "postgres://acemq@db/flows?sslmode=disable&password=xxxxx"},
		{"a URL without //", "postgres:acemq:s3cret@db/flows", "postgres:acemq:xxxxx@db/flows"},
		{"a user without a password", "postgres://acemq@db/flows", "postgres://acemq@db/flows"},
		{"a SQLite file", "sqlite:/var/lib/acemq/flow.db", "sqlite:/var/lib/acemq/flow.db"},
		{"the memory store", "memory:", "memory:"},
		{"a broker URL", "amqp://guest:s3cret@localhost:5672/", "amqp://guest:xxxxx@localhost:5672/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := redactStore(tc.raw); got != tc.want {
				t.Errorf("redactStore(%q) = %q, want %q", tc.raw, got, tc.want)
			}
		})
	}
}

// TestStoreErrorsNeverShowThePassword runs the commands that open a store
// with URLs whose password url.Parse rejects or misplaces.
func TestStoreErrorsNeverShowThePassword(t *testing.T) {
	for _, pw := range []string{"p#ssword", "p%zzword", "pa/ss", "secret pw"} {
		store := "postgres://acemq:" + pw + "@127.0.0.1:1/test?connect_timeout=1"
		for _, args := range [][]string{
			{"outbox", "list", "--store", store},
			{"relay", "--store", store},
			{"migrate", "--store", store},
			{"purge", "--store", store},
			{"run", "--store", store, "--relay", "../../examples/flows/fulfilment.yaml"},
		} {
			t.Run(args[0]+" "+pw, func(t *testing.T) {
				out, errOut, code := cli(t, args...)
				if code != 1 {
					t.Errorf("acemq-flow %s: exit %d, want 1\nstderr: %s", strings.Join(args, " "), code, errOut)
				}
				if strings.Contains(out+errOut, pw) {
					t.Errorf("acemq-flow %s shows the password %q:\n%s%s", strings.Join(args, " "), pw, out, errOut)
				}
			})
		}
	}
}

func TestMissingTablesGiveTheRemedyOnce(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil { // an empty file is an empty SQLite database
		t.Fatal(err)
	}
	stores := map[string]string{"sqlite": "sqlite:" + empty}
	if os.Getenv("ACEMQ_TEST_POSTGRES_URL") != "" {
		stores["postgres"] = testenv.PostgresSchema(t)
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			_, errOut, code := cli(t, "outbox", "list", "--store", store)
			if code != 1 {
				t.Fatalf("outbox list on a store without tables: exit %d, want 1\nstderr: %s", code, errOut)
			}
			if n := strings.Count(errOut, "acemq-flow migrate"); n != 1 || strings.Contains(errOut, "migrate --store") {
				t.Errorf("outbox list on a store without tables names `acemq-flow migrate` %d times, want once and without a URL to copy:\n%s", n, errOut)
			}
			if !strings.Contains(errOut, "has no tables yet") || !strings.Contains(errOut, "--store or ACEMQ_STORE_URL") {
				t.Errorf("outbox list on a store without tables: stderr %q, want what is missing and which store to migrate", errOut)
			}
		})
	}
}

// TestFailingCommandsCreateNoSQLiteFile runs, in an empty folder, commands
// that stop before they use the default store, sqlite:acemq.db.
func TestFailingCommandsCreateNoSQLiteFile(t *testing.T) {
	flow, err := filepath.Abs("../../examples/flows/fulfilment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	t.Setenv("ACEMQ_STORE_URL", "")
	for _, args := range [][]string{
		{"outbox", "list"},
		{"outbox", "list", "--stuck"},
		{"relay"},
		{"run", "--relay", flow},
	} {
		_, errOut, code := cli(t, args...)
		if code == 0 {
			t.Errorf("acemq-flow %s without a store: exit 0, want a failure", strings.Join(args, " "))
		}
		if _, err := os.Stat("acemq.db"); err == nil {
			t.Fatalf("acemq-flow %s failed (%s) and left an acemq.db behind", strings.Join(args, " "), strings.TrimSpace(errOut))
		}
	}
	_, errOut, _ := cli(t, "outbox", "list")
	if !strings.Contains(errOut, "sqlite:acemq.db does not exist") || !strings.Contains(errOut, "acemq-flow migrate") {
		t.Errorf("outbox list without its SQLite file: stderr %q, want the file named and `acemq-flow migrate`", errOut)
	}
}
