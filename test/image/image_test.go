// Package image builds acemq-flow's container images with scripts/image.sh
// (ko, no Docker daemon, no registry) and inspects what it built: user,
// entrypoint, labels, size, the files in the image and the binaries in
// them. It skips when ko is not installed; make image-test installs it.
package image

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const repoRoot = "../.."

// Size budgets: the compressed layers a node pulls.
const (
	runtimeBudget = 30 << 20
	pluginsBudget = 50 << 20
)

var examplePlugins = []string{"orders", "payments", "shipping", "stock"}

// built is what scripts/image.sh wrote, built once for every test.
var built struct {
	out string
	err error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.out != "" {
		os.RemoveAll(built.out)
	}
	os.Exit(code)
}

// buildImages runs scripts/image.sh into a temporary directory, once.
func buildImages(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the images")
	}
	if built.out != "" || built.err != nil {
		if built.err != nil {
			t.Fatal(built.err)
		}
		return built.out
	}
	gobin := filepath.Join(goEnv(t, "GOPATH"), "bin")
	if _, err := exec.LookPath("ko"); err != nil {
		if _, err := os.Stat(filepath.Join(gobin, "ko")); err != nil {
			t.Skip("ko is not installed: make image-test installs it (go install github.com/google/ko@v0.19.1)")
		}
	}
	out, err := os.MkdirTemp("", "acemq-image-")
	if err != nil {
		t.Fatal(err)
	}
	built.out = out
	cmd := exec.Command("scripts/image.sh")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "IMAGE_OUT="+out, "IMAGE_TAG=test", "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if log, err := cmd.CombinedOutput(); err != nil {
		built.err = errors.New("scripts/image.sh: " + err.Error() + "\n" + string(log))
		t.Fatal(built.err)
	}
	return out
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// openImage reads the one image of the OCI layout dir.
func openImage(t *testing.T, dir string) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("read the OCI layout %s: %v", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("%s holds %d manifests, want 1", dir, len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatalf("%s: image %s: %v", dir, m.Manifests[0].Digest, err)
	}
	return img
}

type file struct {
	hdr  *tar.Header
	body []byte // regular files only
}

// files is the image's filesystem, its layers flattened.
func files(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	fs := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read the image's files: %v", err)
		}
		f := file{hdr: h}
		if h.Typeflag == tar.TypeReg {
			if f.body, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		fs["/"+strings.TrimLeft(strings.TrimSuffix(h.Name, "/"), "./")] = f
	}
	return fs
}

func gitHead(t *testing.T) string {
	out, err := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// checkCommon checks what both images share: a non-root user, the
// entrypoint, the OCI labels, the size budget, no shell, and the base's
// passwd and CA bundle.
func checkCommon(t *testing.T, img v1.Image, fs map[string]file, name, entrypoint string, budget int64) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if u := cf.Config.User; u != "65532:65532" {
		t.Errorf("%s: user %q, want 65532:65532 (nonroot)", name, u)
	}
	if cf.OS != "linux" {
		t.Errorf("%s: os %q, want linux", name, cf.OS)
	}
	if ep := cf.Config.Entrypoint; len(ep) != 1 || ep[0] != entrypoint {
		t.Errorf("%s: entrypoint %q, want [%s]", name, ep, entrypoint)
	}
	labels := cf.Config.Labels
	if got := labels["org.opencontainers.image.source"]; got != "https://github.com/acemq/acemq-flow" {
		t.Errorf("%s: label org.opencontainers.image.source = %q", name, got)
	}
	if got := labels["org.opencontainers.image.title"]; got != name {
		t.Errorf("%s: label org.opencontainers.image.title = %q", name, got)
	}
	if got := labels["org.opencontainers.image.version"]; got == "" {
		t.Errorf("%s: no label org.opencontainers.image.version", name)
	}
	if got, head := labels["org.opencontainers.image.revision"], gitHead(t); !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(got) {
		t.Errorf("%s: label org.opencontainers.image.revision = %q, want a commit such as %s", name, got, head)
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			t.Fatal(err)
		}
		size += n
	}
	t.Logf("%s: %d layers, %.1f MiB compressed", name, len(layers), float64(size)/(1<<20))
	if size > budget {
		t.Errorf("%s: %d bytes of layers, over the budget of %d", name, size, budget)
	}

	for path, f := range fs {
		base := filepath.Base(path)
		switch base {
		case "sh", "bash", "dash", "ash", "busybox":
			t.Errorf("%s: holds a shell, %s", name, path)
		}
		if f.hdr.Typeflag == tar.TypeReg && f.hdr.Uid == 0 && f.hdr.Mode&0o002 != 0 {
			t.Errorf("%s: %s is owned by root and writable by anyone", name, path)
		}
	}
	for _, dir := range []string{"/bin", "/usr/bin", "/sbin"} {
		if _, ok := fs[dir]; ok {
			t.Errorf("%s: has %s; the image should hold no programs but its own", name, dir)
		}
	}
	if !strings.Contains(string(fs["/etc/passwd"].body), "nonroot:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd has no nonroot user 65532:\n%s", name, fs["/etc/passwd"].body)
	}
	if !bytes.Contains(fs["/etc/ssl/certs/ca-certificates.crt"].body, []byte("BEGIN CERTIFICATE")) {
		t.Errorf("%s: no CA bundle at /etc/ssl/certs/ca-certificates.crt", name)
	}
	if tmp, ok := fs["/tmp"]; !ok || tmp.hdr.Mode&0o1777 != 0o1777 {
		t.Errorf("%s: no world-writable sticky /tmp", name)
	}
}

// checkStatic fails unless body is a statically linked ELF executable
// built with CGO_ENABLED=0, and returns its build information.
func checkStatic(t *testing.T, name, path string, f file) *buildinfo.BuildInfo {
	t.Helper()
	if f.hdr == nil {
		t.Fatalf("%s: no %s", name, path)
	}
	if f.hdr.Mode&0o111 == 0 {
		t.Errorf("%s: %s is not executable (mode %o)", name, path, f.hdr.Mode)
	}
	ef, err := elf.NewFile(bytes.NewReader(f.body))
	if err != nil {
		t.Fatalf("%s: %s is not an ELF binary: %v", name, path, err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: %s is dynamically linked (it has an interpreter)", name, path)
		}
	}
	bi, err := buildinfo.Read(bytes.NewReader(f.body))
	if err != nil {
		t.Fatalf("%s: %s carries no Go build information: %v", name, path, err)
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" && s.Value != "0" {
			t.Errorf("%s: %s was built with CGO_ENABLED=%s", name, path, s.Value)
		}
	}
	return bi
}

func setting(bi *buildinfo.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

func TestRuntimeImage(t *testing.T) {
	out := buildImages(t)
	img := openImage(t, filepath.Join(out, "acemq-flow"))
	fs := files(t, img)
	checkCommon(t, img, fs, "acemq-flow", "/ko-app/acemq-flow", runtimeBudget)

	f := fs["/ko-app/acemq-flow"]
	bi := checkStatic(t, "acemq-flow", "/ko-app/acemq-flow", f)
	cf, _ := img.ConfigFile()
	if rev := setting(bi, "vcs.revision"); rev != cf.Config.Labels["org.opencontainers.image.revision"] {
		t.Errorf("the binary was built from %q, the image's revision label says %q", rev, cf.Config.Labels["org.opencontainers.image.revision"])
	}
	if setting(bi, "-trimpath") != "true" {
		t.Errorf("acemq-flow was not built with -trimpath")
	}

	// The binary runs as it is (static, no shell): version names the commit.
	bin := filepath.Join(t.TempDir(), "acemq-flow")
	if err := os.WriteFile(bin, f.body, 0o755); err != nil {
		t.Fatal(err)
	}
	v, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("the image's acemq-flow version: %v", err)
	}
	if !strings.Contains(string(v), setting(bi, "vcs.revision")) {
		t.Errorf("the image's acemq-flow version does not name its commit:\n%s", v)
	}

	// The tarball holds the same image.
	tb, err := tarball.ImageFromPath(filepath.Join(out, "acemq-flow.tar"), nil)
	if err != nil {
		t.Fatalf("read acemq-flow.tar: %v", err)
	}
	want, _ := img.ConfigName()
	if got, _ := tb.ConfigName(); got != want {
		t.Errorf("acemq-flow.tar holds config %s, the OCI layout %s", got, want)
	}
}

func TestPluginImage(t *testing.T) {
	out := buildImages(t)
	img := openImage(t, filepath.Join(out, "acemq-flow-plugins"))
	fs := files(t, img)
	checkCommon(t, img, fs, "acemq-flow-plugins", "/ko-app/acemq-flow-plugins", pluginsBudget)
	checkStatic(t, "acemq-flow-plugins", "/ko-app/acemq-flow-plugins", fs["/ko-app/acemq-flow-plugins"])
	for _, p := range examplePlugins {
		path := "/var/run/ko/" + p
		checkStatic(t, "acemq-flow-plugins", path, fs[path])
	}
	cf, _ := img.ConfigFile()
	if !containsEnv(cf.Config.Env, "KO_DATA_PATH=/var/run/ko") {
		t.Errorf("acemq-flow-plugins: env %q lacks KO_DATA_PATH=/var/run/ko, where the entrypoint reads the plugins", cf.Config.Env)
	}

	// The entrypoint installs them, as the init container does.
	bin := filepath.Join(t.TempDir(), "acemq-flow-plugins")
	if err := os.WriteFile(bin, fs["/ko-app/acemq-flow-plugins"].body, 0o755); err != nil {
		t.Fatal(err)
	}
	from := t.TempDir()
	for _, p := range examplePlugins {
		if err := os.WriteFile(filepath.Join(from, p), fs["/var/run/ko/"+p].body, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	dest := filepath.Join(t.TempDir(), "plugins")
	if log, err := exec.Command(bin, "--from", from, dest).CombinedOutput(); err != nil {
		t.Fatalf("the image's acemq-flow-plugins %s: %v\n%s", dest, err, log)
	}
	for _, p := range examplePlugins {
		if info, err := os.Stat(filepath.Join(dest, p)); err != nil || info.Mode().Perm() != 0o555 {
			t.Errorf("plugin %s not installed executable in %s: %v", p, dest, err)
		}
	}
}

func containsEnv(env []string, kv string) bool {
	for _, e := range env {
		if e == kv {
			return true
		}
	}
	return false
}
