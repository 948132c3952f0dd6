package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// GoBuild builds the package pkg, a path from the module's root
// ("./examples/plugins/testkit", "./cmd/acemq-flow"), into the folder dir
// (a temporary folder of the test's when dir is empty), named as the
// package's folder, and returns the binary's path; a build that fails
// fails the test with the compiler's output.
func GoBuild(t testing.TB, dir, pkg string) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = moduleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// moduleRoot is the folder of the go.mod above the test's working folder.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if d == filepath.Dir(d) {
			t.Fatalf("no go.mod in %s or above it", dir)
		}
	}
}
