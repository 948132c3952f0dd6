package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallCopiesEachPluginExecutable(t *testing.T) {
	from, dest := t.TempDir(), filepath.Join(t.TempDir(), "plugins")
	for name, body := range map[string]string{"orders": "#orders", "stock": "#stock"} {
		if err := os.WriteFile(filepath.Join(from, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(from, "not-a-plugin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a second install replaces what the first wrote
		var out bytes.Buffer
		if err := install(from, dest, &out); err != nil {
			t.Fatalf("install: %v", err)
		}
		if got := strings.Count(out.String(), "installed "); got != 2 {
			t.Errorf("install printed %d lines, want 2:\n%s", got, out.String())
		}
	}
	entries, err := os.ReadDir(dest)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("%s holds %d entries, want orders and stock alone", dest, len(entries))
	}
	for _, name := range []string{"orders", "stock"} {
		p := filepath.Join(dest, name)
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o555 {
			t.Errorf("%s: mode %v, want 0555", p, info.Mode().Perm())
		}
		if b, _ := os.ReadFile(p); string(b) != "#"+name {
			t.Errorf("%s holds %q", p, b)
		}
	}
}

func TestInstallRefusesAnEmptyImage(t *testing.T) {
	err := install(t.TempDir(), t.TempDir(), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "make image") {
		t.Errorf("install from an empty directory: %v; want an error naming make image", err)
	}
}
