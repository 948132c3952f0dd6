package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A secret given as NAME_FILE reaches the flag that reads NAME, and the
// value is in no error.
func TestSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	const token = "s3cr3t-canary-token"
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ACEMQ_ADMIN_TOKEN", "")
	os.Unsetenv("ACEMQ_ADMIN_TOKEN")
	t.Setenv("ACEMQ_ADMIN_TOKEN_FILE", file)
	if err := secretsFromFiles(os.LookupEnv, os.Setenv); err != nil {
		t.Fatal(err)
	}
	if got := os.Getenv("ACEMQ_ADMIN_TOKEN"); got != token {
		t.Fatalf("ACEMQ_ADMIN_TOKEN = %q after ACEMQ_ADMIN_TOKEN_FILE; want the file's content without its line end", got)
	}
	// The flag's default now holds it; --help shows it hidden.
	stdout, _, code := cli(t, "schemas", "list", "--help")
	if code != 0 || strings.Contains(stdout, token) || !strings.Contains(stdout, "xxxxx") {
		t.Fatalf("schemas list --help: exit %d; the token from the file must be the hidden default:\n%s", code, stdout)
	}
}

func TestSecretsFromFilesRefuseBadInput(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	full := filepath.Join(dir, "full")
	os.WriteFile(full, []byte("amqp://u:canary-pass@h/"), 0o600)
	for name, c := range map[string]struct {
		env  map[string]string
		want string
	}{
		"missing file": {map[string]string{"ACEMQ_STORE_URL_FILE": filepath.Join(dir, "nope")}, "ACEMQ_STORE_URL_FILE names " + filepath.Join(dir, "nope") + ", which cannot be read (no such file or directory)"},
		"empty file":   {map[string]string{"ACEMQ_AMQP_URL_FILE": empty}, "which is empty"},
		"both set":     {map[string]string{"ACEMQ_AMQP_URL_FILE": full, "ACEMQ_AMQP_URL": "amqp://x/"}, "both ACEMQ_AMQP_URL and ACEMQ_AMQP_URL_FILE are set"},
	} {
		lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		set := func(k, v string) error { c.env[k] = v; return nil }
		err := secretsFromFiles(lookup, set)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v; want one containing %q", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "canary") {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
}
