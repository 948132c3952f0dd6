package spec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// LoadPaths loads flow files named by OS paths (relative or absolute), as
// the command line gives them. The file system is rooted at the deepest
// folder holding every path, so `../flows` works, and diagnostics name the
// files the way they were given (relative to the current directory when the
// paths were relative).
func LoadPaths(opts Options, paths ...string) (*Set, error) {
	if len(paths) == 0 {
		return nil, errors.New("no flow files to load: name the flow files or the folders that hold them")
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	abs := make([]string, len(paths))
	anyAbs := false
	for i, p := range paths {
		if filepath.IsAbs(p) {
			anyAbs = true
			abs[i] = filepath.Clean(p)
		} else {
			abs[i] = filepath.Join(cwd, p)
		}
	}
	root := commonDir(abs)
	rel := make([]string, len(abs))
	for i, a := range abs {
		r, err := filepath.Rel(root, a)
		if err != nil {
			return nil, err
		}
		rel[i] = filepath.ToSlash(r)
	}
	if opts.Root == "" {
		opts.Root = root
	}
	// The paths are named relative to their common folder, which for one
	// folder is "."; a diagnostic about them all shows what was typed.
	opts.given = paths
	if opts.Display == nil {
		opts.Display = func(p string) string {
			full := filepath.Join(root, filepath.FromSlash(p))
			if anyAbs {
				return full
			}
			if r, err := filepath.Rel(cwd, full); err == nil {
				return filepath.ToSlash(r)
			}
			return full
		}
	}
	// Through os.Root, no path, $ref files' symbolic links included, leads
	// out of the folder the flows were named in.
	r, err := os.OpenRoot(root)
	if err != nil {
		// A folder that does not exist: the loader names each missing path.
		return LoadWith(os.DirFS(root), opts, rel...)
	}
	defer r.Close()
	return LoadWith(r.FS(), opts, rel...)
}

// commonDir is the deepest folder that holds every path. A path that is a
// folder counts as holding itself; a file, its folder.
func commonDir(paths []string) string {
	dirOf := func(p string) string {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
		return filepath.Dir(p)
	}
	common := dirOf(paths[0])
	for _, p := range paths[1:] {
		d := dirOf(p)
		for common != d && !strings.HasPrefix(d, common+string(filepath.Separator)) && common != string(filepath.Separator) {
			common = filepath.Dir(common)
		}
	}
	return common
}
