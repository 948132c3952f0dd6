package spec

import (
	"io"
	"os"
	"path/filepath"
)

var errEOF = io.EOF

// LoadPaths loads flow files named by OS paths (relative or absolute), as
// the command line gives them. Diagnostics name the files as given.
func LoadPaths(opts Options, paths ...string) (*Set, error) {
	abs := false
	for _, p := range paths {
		if filepath.IsAbs(p) {
			abs = true
		}
	}
	if !abs {
		if opts.Root == "" {
			opts.Root = "."
		}
		return LoadWith(os.DirFS(opts.Root), opts, paths...)
	}
	// Absolute paths: the file system is rooted at "/", and relative ones
	// are made absolute so that all resolve against the same root.
	cwd, _ := os.Getwd()
	rel := make([]string, len(paths))
	for i, p := range paths {
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		rel[i] = filepath.ToSlash(p)[1:]
	}
	opts.Root = "/"
	opts.Display = func(p string) string { return "/" + p }
	return LoadWith(os.DirFS("/"), opts, rel...)
}
