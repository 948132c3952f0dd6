package spec

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

// FuzzLoad feeds arbitrary bytes to the loader: it must return, with or
// without diagnostics, and never panic or hang.
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"testdata/invalid", "testdata/valid", "../examples/flows"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte("version: acemq.flow/v1\nname: x\na: &a [*a]\n"))
	f.Add([]byte("{{{{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := fstest.MapFS{"f.yaml": {Data: data}}
		_, _ = Load(fsys, "f.yaml")
	})
}
