// Package deploy checks the Kubernetes manifests under deploy/kubernetes
// without a cluster: every document decodes strictly into the Kubernetes
// API types (k8s.io/api, apimachinery's strict decoding: an unknown,
// duplicated or mistyped field fails), and the manifests agree with each
// other and with acemq-flow: the grace period outlasts the drain, the
// probes and the Service name ports the container has, every Secret key
// referenced exists, the flows ConfigMap is mounted where run reads flows
// and those flows load, with their plugins where the init container
// installs them.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/test/testenv"
)

const dir = "../../deploy/kubernetes"

// decoder decodes the built-in kinds strictly.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// documents splits a YAML file into its documents, empty ones left out.
func documents(t *testing.T, data []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

// manifests is every object of deploy/kubernetes, decoded.
type manifests struct {
	deployments []*appsv1.Deployment
	jobs        []*batchv1.Job
	services    []*corev1.Service
	secrets     map[string]*corev1.Secret
	configMaps  map[string]*corev1.ConfigMap
	pdbs        []*policyv1.PodDisruptionBudget
	files       []string // relative to dir
}

// Kinds the API types do not have (a CRD's, kustomize's) are decoded into
// these, strictly, by sigs.k8s.io/yaml.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images"`
}

type serviceMonitor struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Metadata   map[string]any     `json:"metadata"`
	Spec       serviceMonitorSpec `json:"spec"`
}

type serviceMonitorSpec struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	Endpoints []struct {
		Port          string `json:"port"`
		Path          string `json:"path"`
		Interval      string `json:"interval"`
		Authorization struct {
			Type        string                   `json:"type"`
			Credentials corev1.SecretKeySelector `json:"credentials"`
		} `json:"authorization"`
	} `json:"endpoints"`
}

const (
	kustomizationFile  = "kustomization.yaml"
	serviceMonitorFile = "monitoring/servicemonitor.yaml"
)

func load(t *testing.T) *manifests {
	t.Helper()
	dec := decoder(t)
	m := &manifests{secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(p) != ".yaml" && filepath.Ext(p) != ".yml") {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		m.files = append(m.files, rel)
		if rel == kustomizationFile || rel == serviceMonitorFile {
			return nil // decoded by their tests
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, doc := range documents(t, data) {
			obj, gvk, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v", rel, i+1, err)
				continue
			}
			switch o := obj.(type) {
			case *appsv1.Deployment:
				m.deployments = append(m.deployments, o)
			case *batchv1.Job:
				m.jobs = append(m.jobs, o)
			case *corev1.Service:
				m.services = append(m.services, o)
			case *corev1.Secret:
				m.secrets[o.Name] = o
			case *corev1.ConfigMap:
				m.configMaps[o.Name] = o
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, o)
			default:
				t.Errorf("%s, document %d: %s is not a kind this test checks; add it", rel, i+1, gvk)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.deployments) != 1 {
		t.Fatalf("deploy/kubernetes has %d Deployments, want 1", len(m.deployments))
	}
	return m
}

func TestStrictDecodingRejectsWhatTheAPIWould(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(dir, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := decoder(t)
	if _, _, err := dec.Decode(data, nil, nil); err != nil {
		t.Fatalf("deployment.yaml: %v", err)
	}
	cases := []struct{ name, from, to string }{
		{"an unknown field", "  replicas: 3\n", "  replica: 3\n"},
		{"a mistyped field", "  replicas: 3\n", "  replicas: three\n"},
		{"a field in the wrong place", "      terminationGracePeriodSeconds: 45\n", "      terminationGracePeriod: 45\n"},
		{"a duplicated field", "  replicas: 3\n", "  replicas: 3\n  replicas: 4\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(string(data), tc.from, tc.to, 1)
			if bad == string(data) {
				t.Fatalf("deployment.yaml has no %q to change", tc.from)
			}
			if _, _, err := dec.Decode([]byte(bad), nil, nil); err == nil {
				t.Errorf("deployment.yaml with %s decoded without an error", tc.name)
			}
		})
	}
}

func runtimeContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	for i := range d.Spec.Template.Spec.Containers {
		c := &d.Spec.Template.Spec.Containers[i]
		if len(c.Args) > 0 && c.Args[0] == "run" {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container running acemq-flow run", d.Name)
	return nil
}

// flag returns the value of --name in args (--name=v or --name v).
func flag(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// positional returns args' operands after the command (flags all take =).
func positional(args []string) []string {
	var out []string
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "-") {
			out = append(out, a)
		}
	}
	return out
}

func TestGraceOutlastsTheDrain(t *testing.T) {
	m := load(t)
	d := m.deployments[0]
	c := runtimeContainer(t, d)
	v, ok := flag(c.Args, "drain-timeout")
	if !ok {
		t.Fatalf("%s: run has no --drain-timeout; give it one shorter than terminationGracePeriodSeconds", c.Name)
	}
	drain, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("--drain-timeout=%s: %v", v, err)
	}
	gp := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if gp == nil {
		t.Fatalf("Deployment %s: no terminationGracePeriodSeconds (the default, 30s, is no longer than a 30s drain)", d.Name)
	}
	// Some margin beyond the drain: the last acknowledgements and the
	// plugins' exit follow it.
	if grace := time.Duration(*gp) * time.Second; grace < drain+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %s is not at least 5s longer than --drain-timeout %s: the kubelet would kill a draining runtime", grace, drain)
	}
}

func TestProbesAndPorts(t *testing.T) {
	m := load(t)
	d := m.deployments[0]
	c := runtimeContainer(t, d)
	admin, ok := flag(c.Args, "admin")
	if !ok {
		t.Fatalf("run has no --admin: the admin listener would bind 127.0.0.1, out of the probes' reach")
	}
	if !strings.HasPrefix(admin, "0.0.0.0:") && !strings.HasPrefix(admin, ":") {
		t.Errorf("--admin=%s: the probes and Prometheus reach the pod's IP, not its loopback", admin)
	}
	adminPort, err := strconv.Atoi(admin[strings.LastIndex(admin, ":")+1:])
	if err != nil {
		t.Fatalf("--admin=%s: no port", admin)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["metrics"] != int32(adminPort) {
		t.Errorf("container port \"metrics\" is %d, the admin listener (--admin=%s) is on %d", ports["metrics"], admin, adminPort)
	}
	probes := []struct {
		name string
		p    *corev1.Probe
		path string
	}{{"startupProbe", c.StartupProbe, "/healthz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}}
	for _, pr := range probes {
		if pr.p == nil || pr.p.HTTPGet == nil {
			t.Errorf("%s: no %s with httpGet", c.Name, pr.name)
			continue
		}
		g := pr.p.HTTPGet
		if g.Path != pr.path {
			t.Errorf("%s: path %s, want %s", pr.name, g.Path, pr.path)
		}
		port := g.Port.IntVal
		if g.Port.StrVal != "" {
			var ok bool
			if port, ok = ports[g.Port.StrVal]; !ok {
				t.Errorf("%s: port %q is not a port of container %s", pr.name, g.Port.StrVal, c.Name)
			}
		}
		if port != int32(adminPort) {
			t.Errorf("%s: port %d, the admin listener is on %d", pr.name, port, adminPort)
		}
	}

	labels := d.Spec.Template.Labels
	for _, s := range m.services {
		if !selects(s.Spec.Selector, labels) {
			t.Errorf("Service %s: selector %v does not select the Deployment's pods %v", s.Name, s.Spec.Selector, labels)
		}
		for _, p := range s.Spec.Ports {
			if p.TargetPort.StrVal != "" {
				if _, ok := ports[p.TargetPort.StrVal]; !ok {
					t.Errorf("Service %s: targetPort %q is not a port of container %s", s.Name, p.TargetPort.StrVal, c.Name)
				}
			}
		}
	}
	if !selects(d.Spec.Selector.MatchLabels, labels) {
		t.Errorf("Deployment %s: selector %v does not select its own pods %v", d.Name, d.Spec.Selector.MatchLabels, labels)
	}
	for _, p := range m.pdbs {
		if !selects(p.Spec.Selector.MatchLabels, labels) {
			t.Errorf("PodDisruptionBudget %s: selector does not select the Deployment's pods", p.Name)
		}
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestSecretKeysExist(t *testing.T) {
	m := load(t)
	var specs []*corev1.PodSpec
	for _, d := range m.deployments {
		specs = append(specs, &d.Spec.Template.Spec)
	}
	for _, j := range m.jobs {
		specs = append(specs, &j.Spec.Template.Spec)
	}
	refs := 0
	for _, ps := range specs {
		for _, c := range slices.Concat(ps.InitContainers, ps.Containers) {
			for _, e := range c.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				refs++
				checkSecretKey(t, m, c.Name+" env "+e.Name, *e.ValueFrom.SecretKeyRef)
			}
		}
	}
	if refs == 0 {
		t.Error("no container takes a credential from a Secret")
	}
	// The admin token: run binds beyond loopback, so it needs one.
	c := runtimeContainer(t, m.deployments[0])
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "ACEMQ_ADMIN_TOKEN" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
	}) {
		t.Error("run has no ACEMQ_ADMIN_TOKEN from a Secret: bound beyond loopback, it refuses to start without a token")
	}
	for _, e := range c.Env {
		if e.Value != "" && (strings.Contains(e.Value, "://") || strings.Contains(strings.ToLower(e.Name), "token")) {
			t.Errorf("env %s is written in the manifest (%q); take it from the Secret", e.Name, e.Value)
		}
	}
}

func checkSecretKey(t *testing.T, m *manifests, where string, ref corev1.SecretKeySelector) {
	t.Helper()
	s, ok := m.secrets[ref.Name]
	if !ok {
		t.Errorf("%s: Secret %q is not among the manifests", where, ref.Name)
		return
	}
	_, inData := s.Data[ref.Key]
	_, inString := s.StringData[ref.Key]
	if !inData && !inString {
		t.Errorf("%s: Secret %q has no key %q", where, ref.Name, ref.Key)
	}
}

func TestSecurityContexts(t *testing.T) {
	m := load(t)
	var specs []*corev1.PodSpec
	for _, d := range m.deployments {
		specs = append(specs, &d.Spec.Template.Spec)
	}
	for _, j := range m.jobs {
		specs = append(specs, &j.Spec.Template.Spec)
	}
	for _, ps := range specs {
		if sc := ps.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
			t.Errorf("a pod does not run as non-root (runAsNonRoot: true, a runAsUser other than 0): %+v", ps.SecurityContext)
		}
		for _, c := range slices.Concat(ps.InitContainers, ps.Containers) {
			sc := c.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
			}
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
			}
			if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("container %s: capabilities do not drop ALL", c.Name)
			}
			if sc != nil && sc.Privileged != nil && *sc.Privileged {
				t.Errorf("container %s is privileged", c.Name)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("container %s: give it cpu and memory requests and a memory limit", c.Name)
			}
		}
	}
	// The plugin host's sockets go to the temporary directory.
	c := runtimeContainer(t, m.deployments[0])
	if !mounts(c)["/tmp"] {
		t.Errorf("container %s: no writable /tmp, which the plugin host needs on a read-only root", c.Name)
	}
}

func mounts(c *corev1.Container) map[string]bool {
	out := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		out[vm.MountPath] = !vm.ReadOnly
	}
	return out
}

// volumeMount returns the mount of the volume named name in c.
func volumeMount(c *corev1.Container, name string) (corev1.VolumeMount, bool) {
	for _, vm := range c.VolumeMounts {
		if vm.Name == name {
			return vm, true
		}
	}
	return corev1.VolumeMount{}, false
}

// TestFlowsAndPlugins lays the flows ConfigMap out as the kubelet mounts it
// and loads the paths run is given from there: each path is inside the
// mount, the flows are valid and compile, and each plugin's command is in
// the directory the init container installs the plugin image's binaries to.
func TestFlowsAndPlugins(t *testing.T) {
	m := load(t)
	d := m.deployments[0]
	ps := d.Spec.Template.Spec
	c := runtimeContainer(t, d)

	var flowsVol, pluginsVol *corev1.Volume
	for i := range ps.Volumes {
		v := &ps.Volumes[i]
		switch {
		case v.ConfigMap != nil:
			flowsVol = v
		case v.EmptyDir != nil && v.Name == "plugins":
			pluginsVol = v
		}
	}
	if flowsVol == nil {
		t.Fatal("no volume from a ConfigMap holds the flows")
	}
	cm, ok := m.configMaps[flowsVol.ConfigMap.Name]
	if !ok {
		t.Fatalf("volume %s: ConfigMap %q is not among the manifests", flowsVol.Name, flowsVol.ConfigMap.Name)
	}
	flowsMount, ok := volumeMount(c, flowsVol.Name)
	if !ok {
		t.Fatalf("container %s does not mount the flows volume %s", c.Name, flowsVol.Name)
	}

	// The mount, as the kubelet makes it: each item's key at its path,
	// every key when there are no items.
	root := t.TempDir()
	files := map[string]string{}
	if len(flowsVol.ConfigMap.Items) == 0 {
		for k, v := range cm.Data {
			files[k] = v
		}
	}
	for _, it := range flowsVol.ConfigMap.Items {
		v, ok := cm.Data[it.Key]
		if !ok {
			t.Errorf("volume %s: item %q is not a key of ConfigMap %s", flowsVol.Name, it.Key, cm.Name)
		}
		files[it.Path] = v
	}
	if len(flowsVol.ConfigMap.Items) > 0 {
		for k := range cm.Data {
			if !slices.ContainsFunc(flowsVol.ConfigMap.Items, func(it corev1.KeyToPath) bool { return it.Key == k }) {
				t.Errorf("ConfigMap %s: key %q is not mounted (volume %s lists its items); add it to the items", cm.Name, k, flowsVol.Name)
			}
		}
	}
	for p, v := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	paths := positional(c.Args)
	if len(paths) == 0 {
		t.Fatal("run is given no flow path")
	}
	var local []string
	for _, p := range paths {
		rel, err := filepath.Rel(flowsMount.MountPath, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Errorf("run's flow path %s is outside the flows mount %s", p, flowsMount.MountPath)
			continue
		}
		local = append(local, filepath.Join(root, rel))
	}
	if len(local) == 0 {
		t.FailNow()
	}
	set, err := spec.LoadPaths(spec.Options{Env: func(string) (string, bool) { return "", false }}, local...)
	if err != nil {
		t.Fatalf("the flows in ConfigMap %s do not load:\n%v", cm.Name, err)
	}
	if len(set.Flows) == 0 {
		t.Fatalf("ConfigMap %s holds no flow", cm.Name)
	}
	if _, err := plan.Compile(set.Flows); err != nil {
		t.Fatalf("the flows in ConfigMap %s do not compile:\n%v", cm.Name, err)
	}

	if pluginsVol == nil {
		t.Fatal("no emptyDir volume named plugins")
	}
	pluginsMount, ok := volumeMount(c, pluginsVol.Name)
	if !ok || !pluginsMount.ReadOnly {
		t.Errorf("container %s: mount the plugins volume read-only (mounted: %v)", c.Name, ok)
	}
	var installer *corev1.Container
	for i := range ps.InitContainers {
		if vm, ok := volumeMount(&ps.InitContainers[i], pluginsVol.Name); ok && !vm.ReadOnly {
			installer = &ps.InitContainers[i]
		}
	}
	if installer == nil {
		t.Fatal("no init container writes the plugins volume")
	}
	if !strings.Contains(installer.Image, "acemq-flow-plugins") {
		t.Errorf("init container %s runs %s, not the plugin image", installer.Name, installer.Image)
	}
	im, _ := volumeMount(installer, pluginsVol.Name)
	if len(installer.Args) != 1 || installer.Args[0] != im.MountPath {
		t.Errorf("init container %s: args %q; the plugin image's entrypoint takes the directory to install into, %s", installer.Name, installer.Args, im.MountPath)
	}
	for _, f := range set.Flows {
		for _, p := range f.Plugins {
			if filepath.Dir(p.Command) != pluginsMount.MountPath {
				t.Errorf("flow %s: plugin %s runs %s, not a binary of the plugins mount %s", f.Name, p.Name, p.Command, pluginsMount.MountPath)
				continue
			}
			if _, err := os.Stat(filepath.Join("../../examples/plugins", filepath.Base(p.Command), "main.go")); err != nil {
				t.Errorf("flow %s: plugin %s runs %s, which the plugin image does not carry (its plugins are examples/plugins' Go ones)", f.Name, p.Name, p.Command)
			}
		}
	}
}

// TestRunTakesTheArgs checks the runtime's and the migration's arguments
// against acemq-flow's own flags: a flag it does not have would stop the
// pod with a usage error.
func TestRunTakesTheArgs(t *testing.T) {
	m := load(t)
	bin := testenv.GoBuild(t, "", "./cmd/acemq-flow")
	var containers []corev1.Container
	for _, d := range m.deployments {
		containers = append(containers, d.Spec.Template.Spec.Containers...)
	}
	for _, j := range m.jobs {
		containers = append(containers, j.Spec.Template.Spec.Containers...)
	}
	for _, c := range containers {
		if len(c.Args) == 0 {
			t.Errorf("container %s has no args: name the acemq-flow command", c.Name)
			continue
		}
		help, err := exec.Command(bin, c.Args[0], "--help").CombinedOutput()
		if err != nil {
			t.Errorf("container %s: acemq-flow %s --help: %v\n%s", c.Name, c.Args[0], err, help)
			continue
		}
		for _, a := range c.Args[1:] {
			if !strings.HasPrefix(a, "--") {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.Contains(string(help), "--"+name+" ") {
				t.Errorf("container %s: acemq-flow %s has no flag --%s", c.Name, c.Args[0], name)
			}
		}
	}
}

func TestKustomizationAndServiceMonitor(t *testing.T) {
	m := load(t)
	data, err := os.ReadFile(filepath.Join(dir, kustomizationFile))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s: %v", kustomizationFile, err)
	}
	if k.Kind != "Kustomization" {
		t.Errorf("%s: kind %q", kustomizationFile, k.Kind)
	}
	// Applied apart: the Secret from real credentials, the Job before a
	// rollout, the ServiceMonitor where the Prometheus Operator runs.
	apart := []string{kustomizationFile, "secret.example.yaml", "job-migrate.yaml", serviceMonitorFile}
	for _, f := range m.files {
		if !slices.Contains(k.Resources, f) && !slices.Contains(apart, f) {
			t.Errorf("%s is not among the kustomization's resources", f)
		}
	}
	for _, r := range k.Resources {
		if !slices.Contains(m.files, r) {
			t.Errorf("%s: resource %s does not exist", kustomizationFile, r)
		}
	}
	images := map[string]bool{}
	for _, d := range m.deployments {
		for _, c := range slices.Concat(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers) {
			images[strings.Split(c.Image, ":")[0]] = true
		}
	}
	for _, im := range k.Images {
		if !images[im.Name] {
			t.Errorf("%s: image %s is not an image of the Deployment", kustomizationFile, im.Name)
		}
	}

	data, err = os.ReadFile(filepath.Join(dir, serviceMonitorFile))
	if err != nil {
		t.Fatal(err)
	}
	var sm serviceMonitor
	if err := yaml.UnmarshalStrict(data, &sm); err != nil {
		t.Fatalf("%s: %v", serviceMonitorFile, err)
	}
	if len(m.services) != 1 {
		t.Fatalf("want one Service, have %d", len(m.services))
	}
	svc := m.services[0]
	if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) {
		t.Errorf("ServiceMonitor: selector %v does not select Service %s (labels %v)", sm.Spec.Selector.MatchLabels, svc.Name, svc.Labels)
	}
	for _, e := range sm.Spec.Endpoints {
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }) {
			t.Errorf("ServiceMonitor: port %q is not a port of Service %s", e.Port, svc.Name)
		}
		if e.Path != "/metrics" {
			t.Errorf("ServiceMonitor: path %q, want /metrics", e.Path)
		}
		checkSecretKey(t, m, "ServiceMonitor's bearer token", e.Authorization.Credentials)
	}
}
