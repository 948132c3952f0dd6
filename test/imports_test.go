// Package test holds checks of the project as a whole.
package test

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/acemq/acemq-flow/"

// A rule says what a package must not depend on, directly or through
// others. A forbidden entry ending
// in "$" forbids that package alone; any other, it and every package below
// it. allowed lists exceptions to forbidden.
type rule struct {
	pkg       string
	forbidden []string
	allowed   []string
	why       string
}

// rules are the arrows of DESIGN.md's layout and STYLE.md §1.
var rules = []rule{
	{pkg: "spec", forbidden: []string{mod + "runtime", mod + "plugins", mod + "stores", "github.com/rabbitmq/amqp091-go", "github.com/jackc/pgx"},
		why: "a flow is checked with no broker, plugin or database code"},
	{pkg: "schemas", forbidden: []string{mod}, why: "the schema embeds a file and imports nothing of the project"},
	{pkg: "internal/jsonscan", forbidden: []string{mod}, why: "the JSON scanner spec and the codec share knows JSON text only"},
	{pkg: "plugins/sdk", forbidden: []string{mod}, allowed: []string{mod + "plugins/proto"},
		why: "a plugin carries none of the runtime: the SDK imports only plugins/proto"},
	{pkg: "plugins/host", forbidden: []string{mod}, allowed: []string{mod + "plugins/proto"},
		why: "the plugin host knows plugins, not flows, brokers or stores"},
	{pkg: "stores", forbidden: []string{mod}, why: "package stores holds the interfaces and types; its backends import it, never the reverse"},
	{pkg: "stores/schemacompat", forbidden: []string{mod}, allowed: []string{mod + "stores$"},
		why: "the registry's canonical forms and compatibility rules are pure: the backends, the admin API and the CLI share them"},
	{pkg: "stores/memory", forbidden: []string{mod}, allowed: []string{mod + "stores$", mod + "stores/internal", mod + "stores/schemacompat"},
		why: "a backend imports stores, never spec, runtime or another backend"},
	{pkg: "stores/sqlite", forbidden: []string{mod}, allowed: []string{mod + "stores$", mod + "stores/internal", mod + "stores/schemacompat"},
		why: "a backend imports stores, never spec, runtime or another backend"},
	{pkg: "stores/postgres", forbidden: []string{mod}, allowed: []string{mod + "stores$", mod + "stores/internal", mod + "stores/schemacompat"},
		why: "a backend imports stores, never spec, runtime or another backend"},
	{pkg: "stores/fileblobs", forbidden: []string{mod}, allowed: []string{mod + "stores$"},
		why: "a backend imports stores, never spec, runtime or another backend"},
	{pkg: "runtime/plan", forbidden: []string{mod}, allowed: []string{mod + "spec", mod + "schemas", mod + "internal/jsonscan"},
		why: "Compile is pure: flows in, plan out"},
	{pkg: "runtime/decide", forbidden: []string{mod, "github.com/rabbitmq/amqp091-go", "github.com/jackc/pgx", "modernc.org/sqlite"},
		allowed: []string{mod + "runtime/plan", mod + "spec", mod + "schemas", mod + "internal/jsonscan"},
		why:     "the decisions run in the flow-test harness, with no broker, plugin host or store"},
	{pkg: "runtime/broker", forbidden: []string{mod}, why: "the AMQP layer imports amqp091-go only"},
	{pkg: "runtime$", forbidden: []string{mod + "runtime/admin", mod + "runtime/ops", mod + "runtime/relay", mod + "cmd"},
		why: "the engine does not know the packages beside it: the admin API serves it through an interface of its own"},
	{pkg: "runtime/relay", forbidden: []string{mod + "runtime$", mod + "runtime/admin", mod + "runtime/ops", mod + "runtime/scheduler", mod + "plugins", mod + "cmd"},
		why: "the outbox relay publishes stored bytes, into the delay ladder for a record due later: it needs the broker layer, the stores and the ladder's decisions (decide, plan), not the engine or its daemons"},
	{pkg: "runtime/scheduler", forbidden: []string{mod + "runtime$", mod + "runtime/admin", mod + "runtime/ops", mod + "runtime/relay", mod + "plugins", mod + "cmd"},
		why: "the scheduler's daemons (the .due consumer, the schedules' loop) carry out the ladder's decisions on the broker and the store; the engine starts them, they do not know it"},
	{pkg: "runtime/ops", forbidden: []string{mod + "runtime$", mod + "runtime/admin", mod + "runtime/relay", mod + "plugins", mod + "stores"},
		why: "the operator tools talk to the broker; they run without the engine"},
	{pkg: "runtime/admin", forbidden: []string{mod + "runtime/ops", mod + "runtime/relay", mod + "cmd"},
		why: "the admin API serves the engine and the plan"},
	{pkg: "runtime/flowtest", forbidden: []string{mod, "github.com/rabbitmq/amqp091-go", "github.com/jackc/pgx", "modernc.org/sqlite"},
		allowed: []string{mod + "runtime/decide", mod + "runtime/plan", mod + "runtime/hostcall", mod + "spec", mod + "schemas", mod + "internal/jsonscan", mod + "plugins/host", mod + "plugins/proto"},
		why:     "the flow-test harness runs the engine's decisions (decide) on a simulated broker and clock, and the real plugins through the engine's own call (hostcall): never the engine, the broker layer, the scheduler's daemons or a store"},
	{pkg: "runtime/hostcall", forbidden: []string{mod, "github.com/rabbitmq/amqp091-go", "github.com/jackc/pgx", "modernc.org/sqlite"},
		allowed: []string{mod + "runtime/decide", mod + "runtime/plan", mod + "spec", mod + "schemas", mod + "internal/jsonscan", mod + "plugins/host", mod + "plugins/proto"},
		why:     "a step's call into its plugin is shared by the engine and the flow-test harness: plan, decide and plugins/host, never the engine, the broker or a store"},
	{pkg: "runtime/codec", forbidden: []string{mod + "runtime", mod + "plugins", mod + "cmd", "github.com/rabbitmq/amqp091-go"},
		why: "the codec turns bodies into JSON and back by the registry's schemas: spec and the registry's interface, never the engine, the broker or plugins"},
	{pkg: "runtime/flowdiff", forbidden: []string{mod + "runtime", mod + "plugins", mod + "cmd", mod + "stores/postgres", mod + "stores/sqlite", mod + "stores/memory", "github.com/rabbitmq/amqp091-go"}, allowed: []string{mod + "runtime/plan"},
		why: "the change check compares compiled flows (spec, plan, the registry's compatibility rules); the queue depths it reads come from cmd"},
	{pkg: "runtime/tracing", forbidden: []string{mod},
		why: "the spans and the trace context in headers are shared by the engine, the relay, the scheduler and the tools: the package knows OpenTelemetry and header tables, nothing of acemq-flow"},
	{pkg: "runtime/wire", forbidden: []string{mod + "runtime$", mod + "plugins", mod + "stores"},
		why: "wire maps decide's messages to the broker's and back, nothing more"},
}

// protoUsers may import plugins/proto directly: the host, the SDK, and the
// example plugins' tests aside, nothing else speaks the generated protocol.
var protoUsers = []string{mod + "plugins/host", mod + "plugins/sdk", mod + "plugins/proto"}

// TestImportBoundaries keeps the packages' dependencies pointing one way
// (STYLE.md §1); a failure names the chain of imports that crosses a line.
func TestImportBoundaries(t *testing.T) {
	pkgs, err := listPackages("..", "./...")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if _, ok := pkgs[strings.TrimSuffix(mod+r.pkg, "$")]; !ok {
			t.Errorf("rule for %s: no such package; update the rules with the layout", r.pkg)
		}
	}
	for _, v := range check(pkgs, rules) {
		t.Error(v)
	}
	for _, v := range checkEverywhere(pkgs) {
		t.Error(v)
	}
}

// checkEverywhere applies the rules every production package obeys: none
// depends on the test helpers (test/..., stores/storetest), and only
// protoUsers import plugins/proto.
func checkEverywhere(pkgs map[string]*pkgInfo) []string {
	var out []string
	for name, p := range pkgs {
		if !strings.HasPrefix(name, mod) || matches(name, []string{mod + "test", mod + "stores/storetest"}) {
			continue
		}
		out = append(out, check(pkgs, []rule{{pkg: strings.TrimPrefix(name, mod) + "$",
			forbidden: []string{mod + "test", mod + "stores/storetest"},
			why:       "test helpers are for tests: production code must not import them"}})...)
		if matches(name, protoUsers) {
			continue
		}
		if slices.Contains(p.Imports, mod+"plugins/proto") {
			out = append(out, name+" imports "+mod+"plugins/proto, which only plugins/host and plugins/sdk may: plugins are reached through the host, and written with the SDK")
		}
	}
	slices.Sort(out)
	return out
}

type pkgInfo struct {
	ImportPath string
	Imports    []string
}

// listPackages runs `go list -deps -json` on patterns in dir and returns
// every package in the graph by import path.
func listPackages(dir string, patterns ...string) (map[string]*pkgInfo, error) {
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Imports"}, patterns...)...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New("go list: " + err.Error() + "\n" + stderr.String())
	}
	pkgs := map[string]*pkgInfo{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkgInfo
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		pkgs[p.ImportPath] = &p
	}
	return pkgs, nil
}

// check returns a line for every forbidden package a rule's package
// depends on, with the chain of imports that leads there.
func check(pkgs map[string]*pkgInfo, rs []rule) []string {
	var out []string
	for _, r := range rs {
		root := strings.TrimSuffix(mod+r.pkg, "$")
		if _, ok := pkgs[root]; !ok {
			continue
		}
		for dep, chain := range reachable(pkgs, root) {
			if dep == root || !matches(dep, r.forbidden) || matches(dep, r.allowed) {
				continue
			}
			out = append(out, root+" depends on "+dep+", which it must not ("+r.why+"): "+strings.Join(chain, " → "))
		}
	}
	slices.Sort(out)
	return out
}

// matches reports whether pkg is one of list ("x$": x itself; "x": x and
// below it).
func matches(pkg string, list []string) bool {
	for _, f := range list {
		if exact, ok := strings.CutSuffix(f, "$"); ok {
			if pkg == exact {
				return true
			}
			continue
		}
		if pkg == strings.TrimSuffix(f, "/") || strings.HasPrefix(pkg, strings.TrimSuffix(f, "/")+"/") ||
			(strings.HasSuffix(f, "/") && strings.HasPrefix(pkg, f)) {
			return true
		}
	}
	return false
}

// reachable returns every package root depends on, each with the shortest
// chain of imports from root to it.
func reachable(pkgs map[string]*pkgInfo, root string) map[string][]string {
	chains := map[string][]string{root: {root}}
	queue := []string{root}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		p := pkgs[cur]
		if p == nil {
			continue
		}
		for _, imp := range p.Imports {
			if _, seen := chains[imp]; seen {
				continue
			}
			chains[imp] = append(slices.Clone(chains[cur]), imp)
			queue = append(queue, imp)
		}
	}
	return chains
}

// TestTheImportCheckCatchesAPlantedImport plants a forbidden import two
// steps away in a module of its own and checks that the rules catch it,
// naming the chain, and pass once it is gone.
func TestTheImportCheckCatchesAPlantedImport(t *testing.T) {
	dir := t.TempDir()
	write := func(path, text string) {
		t.Helper()
		full := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module github.com/acemq/acemq-flow\n\ngo 1.22\n")
	write("runtime/decide/decide.go", "package decide\n\nimport _ \"github.com/acemq/acemq-flow/runtime/plan\"\n")
	write("runtime/plan/plan.go", "package plan\n\nimport _ \"github.com/acemq/acemq-flow/runtime/broker\"\n")
	write("runtime/broker/broker.go", "package broker\n")
	pkgs, err := listPackages(dir, "./...")
	if err != nil {
		t.Fatal(err)
	}
	got := check(pkgs, rules)
	want := "github.com/acemq/acemq-flow/runtime/plan → github.com/acemq/acemq-flow/runtime/broker"
	if !slices.ContainsFunc(got, func(v string) bool {
		return strings.HasPrefix(v, mod+"runtime/decide depends on "+mod+"runtime/broker") &&
			strings.HasSuffix(v, mod+"runtime/decide → "+want)
	}) {
		t.Fatalf("a decide that reaches the broker through plan: the check said\n%s\nwant a line naming the chain decide → plan → broker", strings.Join(got, "\n"))
	}
	write("runtime/plan/plan.go", "package plan\n")
	pkgs, err = listPackages(dir, "./...")
	if err != nil {
		t.Fatal(err)
	}
	if got := check(pkgs, rules); len(got) != 0 {
		t.Fatalf("with the planted import gone the check still says:\n%s", strings.Join(got, "\n"))
	}
}
