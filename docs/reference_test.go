package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the module's root, seen from this package's folder.
const root = ".."

// metric is a Prometheus metric as the source declares it.
type metric struct {
	name   string
	kind   string   // counter, gauge, histogram, summary; "" when the source does not say
	labels []string // nil when the source does not say
	at     string
}

// source is what the module's Go source declares: metrics, and the
// patterns its HTTP handlers are registered under.
type source struct {
	metrics    map[string]metric
	patterns   map[string]string // pattern → where it is registered
	collectors []string          // go, process: the client's collectors in use
}

// readSource parses every non-test Go file of the module that is built into
// the binary (test/, examples/ and testdata folders are not), wherever the
// runtime's files move to. Anything it cannot read as a literal fails the
// test: a metric or a pattern it cannot see would go unchecked.
func readSource(t *testing.T) source {
	t.Helper()
	src := source{metrics: map[string]metric{}, patterns: map[string]string{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			switch {
			case rel == ".":
				return nil
			case strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor",
				rel == "test", rel == "examples", rel == "docs":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		readFile(t, fset, f, &src)
		return nil
	})
	if err != nil {
		t.Fatalf("reading the module's Go source: %v", err)
	}
	return src
}

// str is the value of a string literal, or false.
func str(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// strs is the value of a []string{...} of literals, or false.
func strs(e ast.Expr) ([]string, bool) {
	cl, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil, false
	}
	out := []string{}
	for _, el := range cl.Elts {
		s, ok := str(el)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// selector reports whether e is pkg.Name, returning Name.
func selector(e ast.Expr, pkg string) (string, bool) {
	se, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	x, ok := se.X.(*ast.Ident)
	if !ok || x.Name != pkg {
		return "", false
	}
	return se.Sel.Name, true
}

// constructors are the prometheus functions that make a metric from its
// options, with the metric's type; a *Vec takes its labels second.
var constructors = map[string]string{
	"NewCounter": "counter", "NewCounterVec": "counter", "NewCounterFunc": "counter",
	"NewGauge": "gauge", "NewGaugeVec": "gauge", "NewGaugeFunc": "gauge",
	"NewHistogram": "histogram", "NewHistogramVec": "histogram",
	"NewSummary": "summary", "NewSummaryVec": "summary",
	"NewUntypedFunc": "",
}

func readFile(t *testing.T, fset *token.FileSet, f *ast.File, src *source) {
	t.Helper()
	where := func(n ast.Node) string {
		p := fset.Position(n.Pos())
		rel, _ := filepath.Rel(root, p.Filename)
		return filepath.ToSlash(rel) + ":" + strconv.Itoa(p.Line)
	}
	// opts reads the name of a prometheus.*Opts literal.
	opts := func(cl *ast.CompositeLit) (string, bool) {
		var parts [3]string // namespace, subsystem, name
		for _, el := range cl.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				t.Errorf("%s: prometheus options without field names; name the fields, so that this test can read them", where(cl))
				return "", false
			}
			key, ok := kv.Key.(*ast.Ident)
			if !ok {
				continue
			}
			i := slices.Index([]string{"Namespace", "Subsystem", "Name"}, key.Name)
			if i < 0 {
				continue
			}
			s, ok := str(kv.Value)
			if !ok {
				t.Errorf("%s: the metric's %s is not a string literal; write it as one, so that this test can read it", where(kv), key.Name)
				return "", false
			}
			parts[i] = s
		}
		var name []string
		for _, p := range parts {
			if p != "" {
				name = append(name, p)
			}
		}
		return strings.Join(name, "_"), parts[2] != ""
	}
	add := func(m metric) {
		if prev, ok := src.metrics[m.name]; ok {
			if m.kind == "" {
				m.kind = prev.kind
			}
			if m.labels == nil {
				m.labels = prev.labels
			}
		}
		src.metrics[m.name] = m
	}
	// helpers maps a function literal assigned to a name, such as
	// `change := func(pattern string, ...)`, to its name.
	helpers := map[*ast.FuncLit]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != len(as.Rhs) {
			return true
		}
		for i, r := range as.Rhs {
			if fl, ok := r.(*ast.FuncLit); ok {
				if id, ok := as.Lhs[i].(*ast.Ident); ok {
					helpers[fl] = id.Name
				}
			}
		}
		return true
	})
	var stack []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		switch n := n.(type) {
		case *ast.CompositeLit:
			if name, ok := selector(n.Type, "prometheus"); ok && strings.HasSuffix(name, "Opts") {
				if m, ok := opts(n); ok {
					add(metric{name: m, at: where(n)})
				}
			}
		case *ast.CallExpr:
			if name, ok := selector(n.Fun, "collectors"); ok {
				switch name {
				case "NewGoCollector":
					src.collectors = append(src.collectors, "go")
				case "NewProcessCollector":
					src.collectors = append(src.collectors, "process")
				}
			}
			if name, ok := selector(n.Fun, "prometheus"); ok {
				if kind, ok := constructors[name]; ok && len(n.Args) > 0 {
					cl, ok := n.Args[0].(*ast.CompositeLit)
					if !ok {
						t.Errorf("%s: prometheus.%s takes its options from elsewhere; write them in the call, so that this test can read them", where(n), name)
						break
					}
					m, ok := opts(cl)
					if !ok {
						break
					}
					var labels []string
					if strings.HasSuffix(name, "Vec") {
						if len(n.Args) < 2 {
							break
						}
						if labels, ok = strs(n.Args[1]); !ok {
							t.Errorf("%s: the labels of %s are not a []string of literals; write them so, so that this test can read them", where(n), m)
						}
					} else {
						labels = []string{}
					}
					add(metric{name: m, kind: kind, labels: labels, at: where(n)})
				}
				if name == "NewDesc" && len(n.Args) >= 3 {
					m, ok := str(n.Args[0])
					if !ok {
						t.Errorf("%s: the name given to prometheus.NewDesc is not a string literal; write it as one, so that this test can read it", where(n))
						break
					}
					labels, ok := strs(n.Args[2])
					if !ok {
						if id, isNil := n.Args[2].(*ast.Ident); isNil && id.Name == "nil" {
							labels = []string{}
						} else {
							t.Errorf("%s: the labels of %s are not a []string of literals; write them so, so that this test can read them", where(n), m)
						}
					}
					add(metric{name: m, labels: labels, at: where(n)})
				}
			}
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "HandleFunc" || sel.Sel.Name == "Handle") && len(n.Args) == 2 {
				for _, p := range patterns(t, f, stack, n.Args[0], helpers, where) {
					src.patterns[p] = where(n)
				}
			}
		}
		return true
	})
}

// patterns reads the pattern a handler is registered under: a literal, or
// a literal prefix and the parameter of a helper (`change := func(pattern
// string, ...)` registering "POST "+pattern), whose calls give the rest.
func patterns(t *testing.T, f *ast.File, stack []ast.Node, arg ast.Expr, helpers map[*ast.FuncLit]string, where func(ast.Node) string) []string {
	t.Helper()
	if s, ok := str(arg); ok {
		return []string{s}
	}
	// A helper's parameter, alone or after a literal prefix: the patterns
	// are the literals the helper is called with.
	var (
		prefix   string
		param    *ast.Ident
		okp, oki bool
	)
	if be, ok := arg.(*ast.BinaryExpr); ok && be.Op == token.ADD {
		prefix, okp = str(be.X)
		param, oki = be.Y.(*ast.Ident)
	} else if id, ok := arg.(*ast.Ident); ok {
		param, okp, oki = id, true, true
	}
	{
		if okp && oki {
			for i := len(stack) - 1; i >= 0; i-- {
				fl, ok := stack[i].(*ast.FuncLit)
				if !ok {
					continue
				}
				idx := -1
				n := 0
				for _, field := range fl.Type.Params.List {
					for _, name := range field.Names {
						if name.Name == param.Name {
							idx = n
						}
						n++
					}
				}
				name, named := helpers[fl]
				if idx < 0 || !named {
					break
				}
				var out []string
				ast.Inspect(f, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != name || len(call.Args) <= idx {
						return true
					}
					s, ok := str(call.Args[idx])
					if !ok {
						t.Errorf("%s: %s is called with a pattern that is not a string literal; write it as one, so that this test can read it", where(call), name)
						return true
					}
					out = append(out, prefix+s)
					return true
				})
				return out
			}
		}
	}
	t.Errorf("%s: a handler is registered under a pattern this test cannot read; write it as a literal (or teach docs/reference_test.go)", where(arg))
	return nil
}

// reference is what docs/reference.md says.
type reference struct {
	text      string
	metrics   map[string]refMetric
	endpoints map[string]bool
}

type refMetric struct {
	kind   string
	labels []string
}

var (
	endpointHeading = regexp.MustCompile("^### `([^`]+)`\\s*$")
	codeSpan        = regexp.MustCompile("`([^`]+)`")
)

// readReference reads the endpoints (headings "### `METHOD /path`") and
// the metrics (rows of the table under "## Metrics": "| `name` | type |
// `label`, ... or — | what it counts |").
func readReference(t *testing.T) reference {
	t.Helper()
	data, err := os.ReadFile("reference.md")
	if err != nil {
		t.Fatal(err)
	}
	ref := reference{text: string(data), metrics: map[string]refMetric{}, endpoints: map[string]bool{}}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(h)
			continue
		}
		if m := endpointHeading.FindStringSubmatch(line); m != nil && section == "Endpoints" {
			ref.endpoints[m[1]] = true
			continue
		}
		if section != "Metrics" || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			t.Errorf("reference.md: metric row %q has fewer than four cells", line)
			continue
		}
		name := codeSpan.FindStringSubmatch(cells[1])
		if name == nil {
			continue
		}
		labels := []string{}
		for _, l := range codeSpan.FindAllStringSubmatch(cells[3], -1) {
			labels = append(labels, l[1])
		}
		ref.metrics[name[1]] = refMetric{kind: strings.TrimSpace(cells[2]), labels: labels}
	}
	return ref
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestReferenceListsEveryMetric(t *testing.T) {
	src, ref := readSource(t), readReference(t)
	if len(src.metrics) == 0 {
		t.Fatalf("found no Prometheus metric in the module's Go source; has the code this test reads moved?")
	}
	for _, name := range slices.Sorted(maps.Keys(src.metrics)) {
		m := src.metrics[name]
		r, ok := ref.metrics[name]
		if !ok {
			t.Errorf("reference.md does not list metric %s (%s): add a row to the table under ## Metrics", name, m.at)
			continue
		}
		if m.kind != "" && r.kind != m.kind {
			t.Errorf("reference.md gives metric %s the type %q, but %s makes a %s", name, r.kind, m.at, m.kind)
		}
		if m.labels != nil && !slices.Equal(sorted(r.labels), sorted(m.labels)) {
			t.Errorf("reference.md gives metric %s the labels %v, but %s declares %v", name, r.labels, m.at, m.labels)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ref.metrics)) {
		if _, ok := src.metrics[name]; !ok {
			t.Errorf("reference.md lists metric %s, which the source no longer declares: remove its row", name)
		}
	}
	for _, c := range src.collectors {
		if !strings.Contains(ref.text, "`"+c+"_*`") {
			t.Errorf("the runtime registers the %s collector, but reference.md does not mention its `%s_*` family", c, c)
		}
	}
}

func TestReferenceListsEveryAdminEndpoint(t *testing.T) {
	src, ref := readSource(t), readReference(t)
	if len(src.patterns) == 0 {
		t.Fatalf("found no HTTP handler in the module's Go source; has the admin API this test reads moved?")
	}
	for _, p := range slices.Sorted(maps.Keys(src.patterns)) {
		if !ref.endpoints[p] {
			t.Errorf("reference.md does not describe %s (registered at %s): add a heading ### `%s` under ## Endpoints", p, src.patterns[p], p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(ref.endpoints)) {
		if _, ok := src.patterns[p]; !ok {
			t.Errorf("reference.md describes %s, which no handler is registered under any more: remove it", p)
		}
	}
}
