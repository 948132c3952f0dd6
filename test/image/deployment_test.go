package image

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/acemq/acemq-flow/test/testenv"
)

// unpack writes the image's filesystem under root, as a container
// runtime lays it out.
func unpack(t *testing.T, img v1.Image, root string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(root, filepath.FromSlash(strings.TrimLeft(h.Name, "./")))
		if !strings.HasPrefix(name, root) {
			t.Fatalf("the image holds a path outside its root: %s", h.Name)
		}
		mode := h.FileInfo().Mode() & (os.ModePerm | os.ModeSticky)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(name, mode); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode.Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		case tar.TypeSymlink:
			os.Symlink(h.Linkname, name)
		}
		os.Lchown(name, h.Uid, h.Gid)
	}
}

func decodeManifest(t *testing.T, file string, into runtime.Object) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy/kubernetes", file))
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := appsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if _, _, err := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer().Decode(data, nil, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// TestTheDeploymentRunsTheImages runs the images as the Deployment of
// deploy/kubernetes says, with no container runtime: the runtime image's
// filesystem as a chroot, the user 65532, the plugin image's entrypoint
// installing the plugins where the init container does, the flows
// ConfigMap laid out as the kubelet mounts it, the Deployment's args (with
// the admin listener on a loopback port of its own) and environment, the
// broker and a store of the test's own. The migration Job's command
// creates the tables, /healthz and /readyz answer as the probes ask, an
// order sent through the fulfilment pipeline completes, and SIGTERM
// drains within the grace period. It needs root (chroot); CI runs as root.
func TestTheDeploymentRunsTheImages(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	out := buildImages(t)
	amqpURL := testenv.VHost(t)
	storeURL := testenv.PostgresSchema(t)

	var d appsv1.Deployment
	decodeManifest(t, "deployment.yaml", &d)
	var cm corev1.ConfigMap
	decodeManifest(t, "configmap-flows.yaml", &cm)
	ps := d.Spec.Template.Spec
	var c corev1.Container
	for _, x := range ps.Containers {
		if x.Name == "acemq-flow" {
			c = x
		}
	}
	init := ps.InitContainers[0]

	root, err := os.MkdirTemp("", "acemq-root-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o755)
	t.Cleanup(func() { os.RemoveAll(root) })
	img := openImage(t, filepath.Join(out, "acemq-flow"))
	unpack(t, img, root)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	// What the container runtime adds: /dev/null, which os/exec opens for
	// a child without stdin.
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(root, "dev/null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatalf("mknod /dev/null: %v", err)
	}

	// The volumes: the plugins emptyDir, written by the plugin image's
	// entrypoint as the init container runs it; the flows ConfigMap.
	mountOf := func(c corev1.Container, volume string) string {
		for _, m := range c.VolumeMounts {
			if m.Name == volume {
				return m.MountPath
			}
		}
		t.Fatalf("container %s does not mount %s", c.Name, volume)
		return ""
	}
	pluginsDir := filepath.Join(root, mountOf(c, "plugins"))
	pluginRoot := t.TempDir()
	unpack(t, openImage(t, filepath.Join(out, "acemq-flow-plugins")), pluginRoot)
	install := exec.Command(filepath.Join(pluginRoot, "ko-app/acemq-flow-plugins"), append([]string{"--from", filepath.Join(pluginRoot, "var/run/ko")}, filepath.Join(root, init.Args[0]))...)
	if log, err := install.CombinedOutput(); err != nil {
		t.Fatalf("the plugin image's entrypoint: %v\n%s", err, log)
	}
	if _, err := os.Stat(filepath.Join(pluginsDir, "orders")); err != nil {
		t.Fatalf("the init container's directory %s is not the runtime's plugins mount: %v", init.Args[0], err)
	}
	flowsDir := filepath.Join(root, mountOf(c, "flows"))
	for _, v := range ps.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		for _, it := range v.ConfigMap.Items {
			p := filepath.Join(flowsDir, it.Path)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(cm.Data[it.Key]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	order, err := os.ReadFile(filepath.Join(repoRoot, "examples/flows/data/order.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "tmp/order.json"), order, 0o644); err != nil {
		t.Fatal(err)
	}

	token := make([]byte, 16)
	rand.Read(token)
	// The container's environment: the image's, then the pod's.
	env := append(append([]string(nil), cf.Config.Env...),
		"ACEMQ_AMQP_URL="+amqpURL,
		"ACEMQ_STORE_URL="+storeURL,
		"ACEMQ_ADMIN_TOKEN="+hex.EncodeToString(token),
		"GOMEMLIMIT=536870912",
	)
	for _, e := range c.Env {
		if e.Value != "" {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	// chrooted runs a command of the image as the pod runs it.
	chrooted := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "/ko-app/acemq-flow", args...)
		cmd.Env = env
		cmd.Dir = cf.Config.WorkingDir
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Chroot:     root,
			Credential: &syscall.Credential{Uid: uint32(*ps.SecurityContext.RunAsUser), Gid: uint32(*ps.SecurityContext.RunAsGroup)},
			Pdeathsig:  syscall.SIGKILL,
		}
		return cmd
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	// The migration Job.
	if log, err := chrooted(ctx, "migrate").CombinedOutput(); err != nil {
		t.Fatalf("migrate in the image: %v\n%s", err, log)
	}

	// The Deployment's container, its admin listener on a port of its own.
	admin := testenv.FreeAddr(t)
	var args []string
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--admin=") {
			a = "--admin=" + admin
		}
		args = append(args, a)
	}
	var logs testenv.Buffer
	run := chrooted(ctx, args...)
	run.Stdout, run.Stderr = &logs, &logs
	if err := run.Start(); err != nil {
		t.Fatalf("run in the image: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			run.Process.Kill()
			<-exited
		}
	}()

	probe := func(path string) error {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", path, resp.Status)
		}
		return nil
	}
	testenv.Eventually(t, time.Minute, func() error {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("run in the image exited: %v\n%s", err, logs.String())
		default:
		}
		if err := probe(c.LivenessProbe.HTTPGet.Path); err != nil {
			return err
		}
		return probe(c.ReadinessProbe.HTTPGet.Path)
	})

	send := chrooted(ctx, "send", "/etc/acemq/flows/fulfilment.yaml", "--pipeline", "fulfilment", "--data", "@/tmp/order.json", "--wait", "60s")
	if log, err := send.CombinedOutput(); err != nil || !strings.Contains(string(log), "outcome: completed") {
		t.Fatalf("send through the fulfilment pipeline in the image: %v\n%s\nruntime:\n%s", err, log, logs.String())
	}

	// The kubelet's SIGTERM: the runtime drains and exits 0 within the
	// grace period.
	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	grace := time.Duration(*ps.TerminationGracePeriodSeconds) * time.Second
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("run exited after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(grace):
		t.Fatalf("run did not exit within the grace period of %s after SIGTERM\n%s", grace, logs.String())
	}
	if !strings.Contains(logs.String(), "drained") {
		t.Errorf("the runtime's log does not say it drained:\n%s", logs.String())
	}
}
