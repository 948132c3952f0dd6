// Command acemq-flow-plugins is the entrypoint of the plugin image: it copies the
// plugin binaries the image carries (ko's kodata, /var/run/ko, filled by
// scripts/image.sh with the example plugins) into a directory, an emptyDir
// that the runtime's container mounts. The image has no shell and no cp,
// so this is how an init container installs them:
//
//	acemq-flow-plugins [--from DIR] DEST
//
// Each file is written to DEST/<name>.tmp, synced, made executable (0555)
// and renamed into place, so the runtime never sees half a binary; a file
// already there is replaced. It prints one line per plugin with its
// SHA-256, the value a flow's plugins.<name>.sha256 may pin.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

func main() {
	from := flag.String("from", envOr("KO_DATA_PATH", "/var/run/ko"), "directory holding the plugin binaries (env KO_DATA_PATH)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "acemq-flow-plugins: usage: acemq-flow-plugins [--from DIR] DEST; name the directory to copy the plugins into")
		os.Exit(2)
	}
	if err := install(*from, flag.Arg(0), os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "acemq-flow-plugins: %v\n", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// install copies every regular file of from into dest and writes a line
// per file to out.
func install(from, dest string, out io.Writer) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return fmt.Errorf("read the plugins in %s: %w", from, err)
	}
	var names []string
	for _, e := range entries {
		info, err := os.Stat(filepath.Join(from, e.Name())) // kodata entries may be symlinks
		if err != nil {
			return fmt.Errorf("plugin %s: %w", e.Name(), err)
		}
		if info.Mode().IsRegular() {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("no plugin in %s: the image was built without them; build it with make image", from)
	}
	sort.Strings(names)
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dest, err)
	}
	for _, n := range names {
		sum, err := copyFile(filepath.Join(from, n), filepath.Join(dest, n))
		if err != nil {
			return fmt.Errorf("install plugin %s into %s: %w", n, dest, err)
		}
		fmt.Fprintf(out, "installed %s sha256:%s\n", filepath.Join(dest, n), sum)
	}
	return nil
}

func copyFile(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o555)
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
