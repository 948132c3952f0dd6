package spec

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"sync"
)

// Options configure Load.
type Options struct {
	// Env looks up ${VAR} substitutions; nil means the process environment.
	Env func(string) (string, bool)
	// Root is the OS path of the file system's root, used to resolve
	// plugin commands to OS paths; "" means the current directory.
	Root string
	// Display maps a path in the file system to the name diagnostics and
	// Flow.File show; nil shows the path as it is.
	Display func(fsPath string) string

	// given is the paths as the caller typed them (LoadPaths), which name
	// them all when none holds a flow; nil names the paths in the file
	// system.
	given []string
}

// Load reads flow files from fsys: each path is a file or a folder, and in a
// folder every *.yaml/*.yml below it is read (a file whose top-level version
// does not start with "acemq.flow/" is skipped with a notice, a flow test
// `*.flowtest.yaml` without one; a file named explicitly is always
// validated). It returns every problem of every file
// at once: the error is Diagnostics, sorted, when any is an error. Warnings
// alone do not fail; they are in Set.Warnings.
func Load(fsys fs.FS, paths ...string) (*Set, error) {
	return LoadWith(fsys, Options{}, paths...)
}

// LoadWith is Load with options.
func LoadWith(fsys fs.FS, opts Options, paths ...string) (*Set, error) {
	if opts.Env == nil {
		opts.Env = os.LookupEnv
	}
	if opts.Display == nil {
		opts.Display = func(p string) string { return p }
	}
	d := &diags{}
	set := &Set{}
	files, explicit := expand(fsys, paths, opts.Display, d)
	var flows []*Flow
	for _, r := range loadFiles(fsys, files, explicit, opts) {
		d.list = append(d.list, r.d.list...)
		if r.skipped != "" {
			set.Notices = append(set.Notices, r.skipped)
		}
		if r.f != nil {
			flows = append(flows, r.f)
		}
	}
	named := paths
	if opts.given != nil {
		named = opts.given
	}
	switch {
	case len(files) == 0 && len(d.list) == 0:
		d.errorf(Pos{File: strings.Join(named, " ")}, "no-flows", "name a flow file or a folder holding *.yaml files",
			"no flow files found")
	case len(flows) == 0 && !d.hasErrors():
		// YAML files, none of them a flow (other tools' files): a path
		// given by mistake must not pass validate in CI.
		d.errorf(Pos{File: strings.Join(named, " ")}, "no-flows", "name a flow file or a folder holding files with version: acemq.flow/v1",
			"no flow files found: every YAML file here has another version (each is listed as skipped)")
	}
	// Cross-file rules only make sense between files that are valid alone.
	if !d.hasErrors() {
		checkSet(flows, d)
	}
	d.list.Sort()
	for _, diag := range d.list {
		if diag.Severity == Warning {
			set.Warnings = append(set.Warnings, diag)
		}
	}
	if d.hasErrors() {
		return set, d.list
	}
	set.Flows = flows
	return set, nil
}

// loaded is what loadFile made of one file.
type loaded struct {
	f       *Flow
	skipped string
	d       diags
}

// loadFiles loads files, as many at once as there are processors: each
// file is read, parsed and checked on its own (cross-file rules come
// after), and most of validate's time is spent so. The results are in the
// order of files.
func loadFiles(fsys fs.FS, files []string, explicit map[string]bool, opts Options) []loaded {
	out := make([]loaded, len(files))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(files), goruntime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := range next {
				out[i].f, out[i].skipped = loadFile(fsys, files[i], explicit[files[i]], opts, &out[i].d)
			}
		})
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// expand turns the paths into the list of files to read.
func expand(fsys fs.FS, paths []string, display func(string) string, d *diags) ([]string, map[string]bool) {
	var files []string
	explicit := map[string]bool{}
	seen := map[string]bool{}
	for _, p := range paths {
		clean := path.Clean(filepath.ToSlash(p))
		st, err := fs.Stat(fsys, clean)
		if err != nil {
			d.errorf(Pos{File: display(clean)}, "no-such-path", "check the path", "%s cannot be read: %v", display(clean), unwrapPathError(err))
			continue
		}
		if !st.IsDir() {
			if !seen[clean] {
				seen[clean] = true
				files = append(files, clean)
			}
			explicit[clean] = true
			continue
		}
		var found []string
		err = fs.WalkDir(fsys, clean, func(fp string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if de.IsDir() {
				if fp != clean && strings.HasPrefix(de.Name(), ".") {
					return fs.SkipDir
				}
				return nil
			}
			if isFlowTest(fp) {
				return nil // a flow test beside the flows (FLOW-FORMAT §7): skipped without a notice
			}
			if ext := path.Ext(fp); ext == ".yaml" || ext == ".yml" {
				found = append(found, fp)
			}
			return nil
		})
		if err != nil {
			d.errorf(Pos{File: display(clean)}, "no-such-path", "check the folder's permissions", "%s cannot be walked: %v", display(clean), err)
		}
		sort.Strings(found)
		for _, fp := range found {
			if !seen[fp] {
				seen[fp] = true
				files = append(files, fp)
			}
		}
	}
	return files, explicit
}

// isFlowTest reports whether a file found in a folder is a flow test
// (`*.flowtest.yaml`, `*.flowtest.yml`), which `acemq-flow test` reads and
// a folder of flows leaves out.
func isFlowTest(file string) bool {
	return strings.HasSuffix(file, ".flowtest.yaml") || strings.HasSuffix(file, ".flowtest.yml")
}

// loadFile reads, parses, schema-checks, builds and checks one file. A file
// that fails a stage does not go on to the next.
func loadFile(fsys fs.FS, file string, explicit bool, opts Options, all *diags) (*Flow, string) {
	name := opts.Display(file)
	data, err := readLimited(fsys, file, name)
	if err != nil {
		all.errorf(Pos{File: name, Line: 1, Col: 1}, "unreadable", "check the file", "%v", err)
		return nil, ""
	}
	d := &diags{}
	defer func() { all.list = append(all.list, d.list...) }()
	root := parseYAML(name, data, opts.Env, d)
	if root == nil {
		return nil, ""
	}
	if !explicit {
		v, _ := root.get("version").str()
		if !strings.HasPrefix(v, "acemq.flow/") {
			d.list = nil
			return nil, fmt.Sprintf("%s: skipped: its version is not acemq.flow/…", name)
		}
	}
	if d.hasErrors() { // substitution errors
		return nil, ""
	}
	checkSchema(root, d)
	if d.hasErrors() {
		return nil, ""
	}
	b := &builder{file: name, dir: path.Dir(file), root: opts.Root, d: d}
	f := b.flow(root)
	if d.hasErrors() {
		return nil, ""
	}
	checkFile(f, newTypeCompiler(fsys, file), d)
	if d.hasErrors() {
		return nil, ""
	}
	return f, ""
}

// readLimited reads at most one byte past MaxFileSize: enough to say a
// file is too large without reading 50 MB of it.
func readLimited(fsys fs.FS, file, name string) ([]byte, error) {
	fh, err := fsys.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%s cannot be read: %w", name, unwrapPathError(err))
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s cannot be read: %w", name, err)
	}
	// A byte order mark, as some Windows editors write, is not part of the
	// text: left in, it joined the first key ("\ufeffversion").
	return bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")), nil
}
