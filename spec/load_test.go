package spec_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// validate does what `acemq-flow validate` does: Load, then Compile.
func validate(t *testing.T, paths ...string) spec.Diagnostics {
	t.Helper()
	env := func(k string) (string, bool) { return "", false }
	set, err := spec.LoadPaths(spec.Options{Env: env}, paths...)
	var ds spec.Diagnostics
	if set != nil {
		ds = append(ds, set.Warnings...)
	}
	if err != nil {
		var errDs spec.Diagnostics
		if !errors.As(err, &errDs) {
			t.Fatalf("Load(%v) returned %T %v, want spec.Diagnostics", paths, err, err)
		}
		return dedupe(append(ds, errDs...))
	}
	if _, err := plan.Compile(set.Flows); err != nil {
		var errDs spec.Diagnostics
		if !errors.As(err, &errDs) {
			t.Fatalf("Compile(%v) returned %T %v, want spec.Diagnostics", paths, err, err)
		}
		ds = append(ds, errDs...)
	}
	return dedupe(ds)
}

func dedupe(ds spec.Diagnostics) spec.Diagnostics {
	seen := map[string]bool{}
	var out spec.Diagnostics
	for _, d := range ds {
		if !seen[d.String()] {
			seen[d.String()] = true
			out = append(out, d)
		}
	}
	out.Sort()
	return out
}

// wants reads the "# want:" block at the end of a flow file: one
// "line:col severity code" per line.
func wants(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "# want:")
	if !ok {
		t.Fatalf("%s has no # want: block", file)
	}
	var out []string
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if line != "" {
			out = append(out, filepath.ToSlash(file)+":"+line)
		}
	}
	return out
}

// TestInvalidFlows runs every flow under testdata/invalid (a file, or a
// folder of files loaded together) and checks each diagnostic's position,
// severity and code against its "# want:" block, and the whole text output
// against the golden file beside it.
func TestInvalidFlows(t *testing.T) {
	entries, err := os.ReadDir("testdata/invalid")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, ".golden") {
			continue
		}
		path := filepath.Join("testdata/invalid", name)
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			var want []string
			if e.IsDir() {
				_ = filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
					if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") {
						want = append(want, wants(t, p)...)
					}
					return nil
				})
			} else {
				want = wants(t, path)
			}
			ds := validate(t, path)
			var got []string
			for _, d := range ds {
				got = append(got, fmt.Sprintf("%s %s %s", d.Pos, d.Severity, d.Code))
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("validate %s:\n got  %s\n want %s\nfull output:\n%s", path, strings.Join(got, "\n      "), strings.Join(want, "\n      "), ds.Error())
			}
			golden(t, strings.TrimSuffix(path, ".yaml")+".golden", []byte(ds.Error()+"\n"))
		})
	}
}

func golden(t *testing.T, file string, got []byte) {
	t.Helper()
	testenv.Golden(t, file, got, *update)
}

func TestExamplesAndValidFlowsValidateCleanly(t *testing.T) {
	for _, dir := range []string{"../examples/flows", "testdata/valid"} {
		if ds := validate(t, dir); len(ds) > 0 {
			t.Errorf("validate %s: want no diagnostics, got:\n%s", dir, ds.Error())
		}
	}
}

func TestSubstitutionTypesNumbersAndBooleansWhereTheFormatExpectsThem(t *testing.T) {
	fsys := fstest.MapFS{"f.yaml": {Data: []byte(`version: acemq.flow/v1
name: shop
defaults:
  prefetch: "${PREFETCH}"
  idempotent: "${IDEM:false}"
plugins:
  p: {command: ./p, env: {concurrency: "${PREFETCH}"}}
consumers:
  - id: audit
    queue: audit.log
    handler: p.write
    description: "kept for ${DAYS} days"
    declare: {type: classic, arguments: {x-message-ttl: "${TTL:60000}", x-single-active-consumer: "${SAC:true}", x-note: "${NOTE:abc}"}}
`)}}
	env := map[string]string{"PREFETCH": "50", "DAYS": "30"}
	set, err := spec.LoadWith(fsys, spec.Options{Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}, "f.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	c := set.Flows[0].Consumers[0]
	if c.Prefetch != 50 {
		t.Errorf("prefetch = %d, want 50 from ${PREFETCH}", c.Prefetch)
	}
	if c.Description != "kept for 30 days" {
		t.Errorf("description = %q, want the variable substituted inside the text", c.Description)
	}
	args := c.Declare.Arguments
	if v, ok := args["x-message-ttl"].(int64); !ok || v != 60000 {
		t.Errorf("x-message-ttl = %#v, want int64 60000 (the broker refuses a string)", args["x-message-ttl"])
	}
	if v, ok := args["x-single-active-consumer"].(bool); !ok || !v {
		t.Errorf("x-single-active-consumer = %#v, want bool true", args["x-single-active-consumer"])
	}
	if v, ok := args["x-note"].(string); !ok || v != "abc" {
		t.Errorf("x-note = %#v, want the string abc", args["x-note"])
	}
	// A plugin's env holds variables, whatever their names: text.
	if v := set.Flows[0].Plugins[0].Env["concurrency"]; v != "50" {
		t.Errorf("plugin env concurrency = %q, want the text 50", v)
	}
}

func TestDefaultsAreFilledAndInherited(t *testing.T) {
	fsys := fstest.MapFS{"f.yaml": {Data: []byte(`version: acemq.flow/v1
name: shop
defaults:
  prefetch: 7
  retry: {max_attempts: 3}
plugins:
  p: {command: ./p}
pipelines:
  - name: fulfilment
    steps:
      - {name: a, handler: p.a}
      - {name: b, handler: p.b, retry: {initial_delay: 1s}, concurrency: 4}
`)}}
	set, err := spec.Load(fsys, "f.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	steps := set.Flows[0].Pipelines[0].Steps
	a, b := steps[0], steps[1]
	if a.Prefetch != 7 || a.Concurrency != 1 || a.QueueType != "quorum" || !a.AutoStartup {
		t.Errorf("step a = prefetch %d, concurrency %d, queue %s, auto_startup %v; want 7, 1, quorum, true", a.Prefetch, a.Concurrency, a.QueueType, a.AutoStartup)
	}
	if a.Retry.MaxAttempts != 3 || a.Retry.InitialDelay != 2*time.Second || a.Retry.MaxDelay != 30*time.Second || a.Retry.Jitter != 0.2 {
		t.Errorf("step a retry = %+v, want defaults.retry's 3 attempts over the built-in delays", a.Retry)
	}
	if b.Retry.MaxAttempts != 3 || b.Retry.InitialDelay != time.Second || b.Concurrency != 4 {
		t.Errorf("step b retry = %+v, concurrency %d; want 3 attempts from defaults, 1s from the step, concurrency 4", b.Retry, b.Concurrency)
	}
	if set.Flows[0].Plugin("p").Timeout != 30*time.Second {
		t.Errorf("plugin timeout = %s, want the 30s default", set.Flows[0].Plugin("p").Timeout)
	}
}

func TestHostileInputGetsAnErrorNotAPanicOrAHang(t *testing.T) {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	huge := make([]byte, 50<<20)
	for i := range huge {
		huge[i] = 'a'
	}
	cases := []struct {
		name string
		data []byte
		code string
	}{
		{"a 50 MB file", huge, "file-too-large"},
		{"binary garbage", []byte{0x7f, 'E', 'L', 'F', 0, 0, 0xff, 0xfe, 0x01}, "not-yaml"},
		{"ten thousand levels of nesting", []byte("version: acemq.flow/v1\nname: x\nx: " + deep + "\n"), ""},
		{"an empty file", nil, "empty-file"},
		{"a list at the top level", []byte("- a\n- b\n"), "not-a-mapping"},
		{"two documents", []byte("version: acemq.flow/v1\nname: a\n---\nversion: acemq.flow/v1\nname: b\n"), "multiple-documents"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{"f.yaml": {Data: tc.data}}
			start := time.Now()
			_, err := spec.Load(fsys, "f.yaml")
			var ds spec.Diagnostics
			if !errors.As(err, &ds) || !ds.HasErrors() {
				t.Fatalf("Load = %v, want error diagnostics", err)
			}
			if tc.code != "" && ds[0].Code != tc.code {
				t.Errorf("Load: first diagnostic %s, want code %s", ds[0], tc.code)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Load took %s; hostile input must be rejected quickly", d)
			}
		})
	}
}

func TestFolderSkipsFilesOfOtherFormatsButNotNamedOnes(t *testing.T) {
	fsys := fstest.MapFS{
		"flows/a.yaml":             {Data: []byte("version: acemq.flow/v1\nname: a\n")},
		"flows/ci.yml":             {Data: []byte("on: push\njobs: {}\n")},
		"flows/a.flowtest.yaml":    {Data: []byte("version: acemq.flowtest/v1\ncases: []\n")},
		"flows/nested/b.yml":       {Data: []byte("version: acemq.flow/v1\nname: b\n")},
		"flows/.hidden/c.yaml":     {Data: []byte("version: acemq.flow/v1\nname: c\n")},
		"flows/schemas/order.json": {Data: []byte("{}")},
	}
	set, err := spec.Load(fsys, "flows")
	if err != nil {
		t.Fatalf("Load(flows): %v", err)
	}
	var names []string
	for _, f := range set.Flows {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("Load(flows) read flows %v, want [a b]", names)
	}
	if len(set.Notices) != 1 || !strings.Contains(set.Notices[0], "flows/ci.yml") {
		t.Errorf("notices = %q, want one naming flows/ci.yml as skipped", set.Notices)
	}
	if _, err := spec.Load(fsys, "flows/ci.yml"); err == nil {
		t.Error("Load(flows/ci.yml) named explicitly succeeded; a named file is always validated")
	}
}

func TestPayloadTypesAssertFormats(t *testing.T) {
	fsys := fstest.MapFS{"f.yaml": {Data: []byte(`version: acemq.flow/v1
name: shop
types:
  Reservation:
    type: object
    required: [order_id, until]
    properties: {order_id: {type: string}, until: {type: string, format: date-time}}
`)}}
	set, err := spec.Load(fsys, "f.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	typ := set.Flows[0].Type("Reservation")
	if err := typ.ValidateJSON([]byte(`{"order_id":"o-1","until":"2026-09-09T14:03:11Z"}`)); err != nil {
		t.Errorf("a valid reservation was refused: %v", err)
	}
	if err := typ.ValidateJSON([]byte(`{"order_id":"o-1","until":"next tuesday"}`)); err == nil {
		t.Error("a reservation with until \"next tuesday\" was accepted; date-time must be asserted")
	}
	if err := typ.ValidateJSON([]byte(`{"order_id":"o-1"}`)); err == nil || !strings.Contains(err.Error(), "until") {
		t.Errorf("a reservation without until: err = %v, want one naming until", err)
	}
	if err := typ.ValidateJSON([]byte(`{not json`)); err == nil {
		t.Error("a payload that is not JSON was accepted")
	}
}

func TestConditionsEvaluateOnPayloads(t *testing.T) {
	fsys := fstest.MapFS{"f.yaml": {Data: []byte(`version: acemq.flow/v1
name: shop
types:
  Order: {type: object, properties: {total: {type: number}, items: {type: array}}}
itineraries:
  - name: approval
    input: Order
    stops:
      - {name: approve, exchange: x, routing_key: k, when: "payload.total > 1000"}
      - {name: pack, exchange: x, routing_key: k2, when: "len(payload.items) > 0"}
      - {name: blow, exchange: x, routing_key: k3, when: "len(1..100000000 | filter(# > 0)) > 0"}
      - {name: keyed, exchange: x, routing_key: k4, when: "len(keys(payload)) > 1"}
`)}}
	set, err := spec.Load(fsys, "f.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	stops := set.Flows[0].Itineraries[0].Stops
	big, _ := spec.DecodeJSON([]byte(`{"total": 1500, "items": [1]}`))
	small, _ := spec.DecodeJSON([]byte(`{"total": 20.5, "items": []}`))
	for _, tc := range []struct {
		stop    int
		payload any
		want    bool
	}{{0, big, true}, {0, small, false}, {1, big, true}, {1, small, false},
		// A typed payload is checked as a struct, which has no keys; the
		// expression runs on the decoded map.
		{3, big, true}, {3, map[string]any{"total": 1.0}, false}} {
		got, err := stops[tc.stop].When.Eval(tc.payload)
		if err != nil || got != tc.want {
			t.Errorf("when %q on %v = %v, %v; want %v", stops[tc.stop].When.Source, tc.payload, got, err, tc.want)
		}
	}
	start := time.Now()
	if _, err := stops[2].When.Eval(big); err == nil {
		t.Errorf("when %q evaluated without hitting the memory budget", stops[2].When.Source)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the memory budget took %s to stop a runaway expression", d)
	}
}

// TestAByteOrderMarkIsNotPartOfTheText: a file some Windows editors start
// with a byte order mark loads, named or found in a folder.
func TestAByteOrderMarkIsNotPartOfTheText(t *testing.T) {
	for _, path := range []string{"testdata/valid/bom.yaml", "testdata/valid"} {
		set, err := spec.LoadPaths(spec.Options{}, path)
		if err != nil {
			t.Fatalf("LoadPaths(%s): %v", path, err)
		}
		found := false
		for _, f := range set.Flows {
			found = found || f.Name == "bom"
		}
		if !found {
			t.Errorf("LoadPaths(%s) did not load the flow of bom.yaml", path)
		}
	}
}

// TestARefOutsideTheFolderIsRefusedHoweverTheFlowIsNamed: named alone, a
// flow's folder is the root of the file system it is read from, where URL
// resolution turned "../secret.json" into the secret.json beside the flow
// (a decoy here) and loaded it without a word.
func TestARefOutsideTheFolderIsRefusedHoweverTheFlowIsNamed(t *testing.T) {
	_, err := spec.LoadPaths(spec.Options{}, "testdata/invalid/ref-outside/flows/flow.yaml")
	if err == nil || !strings.Contains(err.Error(), `$ref "../secret.json" points outside the flow file's folder`) {
		t.Fatalf("LoadPaths(flows/flow.yaml) = %v, want the $ref refused as outside the folder", err)
	}
}

// TestARefThroughASymbolicLinkStaysInside: a $ref file that is a symbolic
// link to a file outside the folder the flows were named in is not read.
func TestARefThroughASymbolicLinkStaysInside(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "outside.json"), []byte(`{"type": "string"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	flows := filepath.Join(dir, "flows")
	if err := os.Mkdir(flows, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "outside.json"), filepath.Join(flows, "s.json")); err != nil {
		t.Fatal(err)
	}
	flow := "version: acemq.flow/v1\nname: sym\ntypes:\n  S: {$ref: s.json}\n"
	if err := os.WriteFile(filepath.Join(flows, "f.yaml"), []byte(flow), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := spec.LoadPaths(spec.Options{}, filepath.Join(flows, "f.yaml"))
	if err == nil || !strings.Contains(err.Error(), "s.json cannot be read") {
		t.Fatalf("LoadPaths with a $ref linked outside = %v, want s.json refused", err)
	}
}

// TestAFolderOfOtherYAMLHasNoFlows: a folder whose YAML files all belong to
// other tools holds no flows; validate must fail, not pass a wrong path.
func TestAFolderOfOtherYAMLHasNoFlows(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "k8s.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := spec.LoadPaths(spec.Options{}, dir)
	var ds spec.Diagnostics
	if !errors.As(err, &ds) || len(ds) != 1 || ds[0].Code != "no-flows" {
		t.Fatalf("LoadPaths(a folder of other YAML) = %v, want one no-flows error", err)
	}
}

// TestAFolderLoadsInFileOrder loads a folder of many files, some of another
// format and some invalid, as validate does (several at once): the flows
// and skip notices come in the order of the files, and every invalid file
// is named, the same on every load.
func TestAFolderLoadsInFileOrder(t *testing.T) {
	fsys := fstest.MapFS{}
	var wantSkipped, wantBad []string
	for i := range 40 {
		name := fmt.Sprintf("flows/f%02d.yaml", i)
		switch i % 4 {
		case 1:
			fsys[name] = &fstest.MapFile{Data: []byte("version: other/v1\n")}
			wantSkipped = append(wantSkipped, name)
		case 2:
			fsys[name] = &fstest.MapFile{Data: []byte(fmt.Sprintf("version: acemq.flow/v1\nname: bad-%d\npipelines: 3\n", i))}
			wantBad = append(wantBad, name)
		default:
			fsys[name] = &fstest.MapFile{Data: []byte(fmt.Sprintf("version: acemq.flow/v1\nname: flow-%02d\nconsumers:\n  - {id: c%d, queue: q%d, handler: p.h}\nplugins:\n  p: {command: ./p}\n", i, i, i))}
		}
	}
	var first string
	for range 5 {
		set, err := spec.Load(fsys, "flows")
		var diags spec.Diagnostics
		if !errors.As(err, &diags) {
			t.Fatalf("err = %v, want the diagnostics of %d invalid files", err, len(wantBad))
		}
		var skipped []string
		for _, n := range set.Notices {
			skipped = append(skipped, strings.SplitN(n, ":", 2)[0])
		}
		if !slices.Equal(skipped, wantSkipped) {
			t.Errorf("skip notices name %q, want %q in that order", skipped, wantSkipped)
		}
		named := map[string]bool{}
		for _, d := range diags {
			named[d.Pos.File] = true
		}
		for _, f := range wantBad {
			if !named[f] {
				t.Errorf("no diagnostic names %s", f)
			}
		}
		if first == "" {
			first = diags.Error()
		} else if diags.Error() != first {
			t.Errorf("the diagnostics differ from one load to the next:\n%s\nthen\n%s", first, diags.Error())
		}
	}
	// Without the invalid files, the flows come in file order.
	for _, f := range wantBad {
		delete(fsys, f)
	}
	set, err := spec.Load(fsys, "flows")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range set.Flows {
		names = append(names, f.Name)
	}
	if !slices.IsSorted(names) || len(names) != 20 {
		t.Errorf("flows = %q, want the 20 valid ones in file order", names)
	}
}

func TestLoadPathsWithoutPathsSaysSo(t *testing.T) {
	_, err := spec.LoadPaths(spec.Options{})
	if err == nil || !strings.Contains(err.Error(), "no flow files to load") {
		t.Fatalf("LoadPaths() = %v, want an error saying no flow files were named", err)
	}
}
