package flowtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/spec"
)

// Version is what a test file's top-level `version` says.
const Version = "acemq.flowtest/v1"

// Suffix ends the name of every test file.
const Suffix = ".flowtest.yaml"

// DefaultStart is where a case's virtual clock starts unless the file says.
var DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// File is one test file, read.
type File struct {
	Path  string   // as named to Load
	Flows []string // the flow files or folders it tests, OS paths
	Start time.Time
	Cases []*Case
	src   []byte
	root  *spec.Node
}

// Case is one test of a file: the handlers' outcomes, the steps it takes
// and what it expects at the end.
type Case struct {
	Name     string
	Pos      spec.Pos
	Handlers map[string]*Handler
	Steps    []*Step
	Expect   *Expect // nil: only that nothing was dead-lettered
}

// Handler is what one handler does, attempt by attempt: Outcomes[i] on
// attempt i+1, the last one on every later attempt.
type Handler struct {
	Key      string
	Pos      spec.Pos
	Outcomes []Outcome
}

// Outcome is a handler's outcome on one attempt. The zero value returns
// the input as it came (echo).
type Outcome struct {
	Return    json.RawMessage // set: return this payload
	Stop      bool
	Fail      string        // a retryable failure with this error
	Fatal     string        // a fatal failure: straight to .dlq
	Sleep     time.Duration // the call lasts this long on the clock; past the plugin's timeout it fails
	Pos       spec.Pos
	hasReturn bool
}

// Step is one step of a case: a send, a move of the clock, or a check.
type Step struct {
	Pos     spec.Pos
	Send    *Send
	Advance time.Duration
	Idle    bool // run: until_idle
	Expect  *Expect
}

// Send is a message a case sends: to the start of a pipeline, itinerary or
// saga, to an exchange with a routing key, or to a queue.
type Send struct {
	Target  decide.Target
	Queue   string
	Payload []byte
	ReplyTo string
	In      time.Duration // through the delay ladder, due this long after now
	ID      string        // the message id; a new one when empty
	Pos     spec.Pos
}

// Load reads the test files among paths: each path is a test file, or a
// folder searched for *.flowtest.yaml below it (but in folders named
// testdata or starting with a dot, searched only when named).
func Load(paths ...string) ([]*File, spec.Diagnostics) {
	var files []string
	var ds spec.Diagnostics
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			ds = append(ds, spec.Diagnostic{Pos: spec.Pos{File: p}, Severity: spec.Error, Code: "flowtest-path", Msg: fmt.Sprintf("cannot read %s: %v", p, err), Hint: "name a test file or a folder holding *" + Suffix + " files"})
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		_ = filepath.WalkDir(p, func(fp string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && fp != p && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				// As go test does: test data and hidden folders are
				// searched only when named.
				return filepath.SkipDir
			}
			if err == nil && !d.IsDir() && strings.HasSuffix(fp, Suffix) {
				files = append(files, fp)
			}
			return nil
		})
	}
	if len(files) == 0 && len(ds) == 0 {
		ds = append(ds, spec.Diagnostic{Pos: spec.Pos{File: strings.Join(paths, " ")}, Severity: spec.Error, Code: "no-flowtests",
			Msg: "no test files found", Hint: "write flow tests in files named *" + Suffix + " beside the flows"})
	}
	slices.Sort(files)
	var out []*File
	for _, fp := range files {
		f, fds := ReadFile(fp)
		ds = append(ds, fds...)
		if f != nil {
			out = append(out, f)
		}
	}
	return out, ds
}

// yamlKind names a test file in spec.ReadYAML's diagnostics.
var yamlKind = spec.YAMLKind{Name: "a test file", Empty: "start it with `version: " + Version + "`", One: "keep one document a file: a test file holds its cases"}

// ReadFile reads one test file.
func ReadFile(path string) (*File, spec.Diagnostics) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, spec.Diagnostics{{Pos: spec.Pos{File: path}, Severity: spec.Error, Code: "flowtest-read", Msg: err.Error()}}
	}
	return Parse(path, data)
}

// Parse reads a test file's text; path names it in diagnostics and is where
// its flows and payload files are found from.
func Parse(path string, data []byte) (*File, spec.Diagnostics) {
	root, ds := spec.ReadYAML(path, data, yamlKind)
	if root == nil {
		return nil, ds
	}
	r := &reader{file: path, dir: filepath.Dir(path)}
	f := r.file1(root)
	if f != nil {
		f.src, f.root = data, root
	}
	if len(r.ds) > 0 {
		return nil, r.ds
	}
	return f, nil
}

type reader struct {
	file string
	dir  string
	ds   spec.Diagnostics
}

func (r *reader) errorf(pos spec.Pos, hint, format string, args ...any) {
	if pos.File == "" {
		pos.File = r.file
	}
	r.ds = append(r.ds, spec.Diagnostic{Pos: pos, Severity: spec.Error, Code: "flowtest-format", Msg: fmt.Sprintf(format, args...), Hint: hint})
}

// keys refuses keys of mapping n that are not among allowed.
func (r *reader) keys(n *spec.Node, what string, allowed ...string) {
	for _, k := range n.Keys() {
		if s, _ := k.Value().(string); !slices.Contains(allowed, s) {
			r.errorf(k.Pos(), "use one of: "+strings.Join(allowed, ", "), "unknown key %q in %s", fmt.Sprint(k.Value()), what)
		}
	}
}

func (r *reader) file1(root *spec.Node) *File {
	if root == nil || !root.IsMap() {
		r.errorf(spec.Pos{File: r.file, Line: 1, Col: 1}, "start it with `version: "+Version+"` and `cases:`", "a test file is a mapping")
		return nil
	}
	r.keys(root, "a test file", "version", "flows", "start", "cases")
	f := &File{Path: r.file, Start: DefaultStart}
	if v, _ := root.Get("version").Str(); v != Version {
		pos := root.Pos()
		if n := root.Get("version"); n != nil {
			pos = n.Pos()
		}
		r.errorf(pos, "write `version: "+Version+"`", "the test file's version is %q, not %s", v, Version)
	}
	if n := root.Get("flows"); n != nil {
		for _, it := range r.list(n) {
			s, ok := it.Str()
			if !ok {
				r.errorf(it.Pos(), "name a flow file or folder relative to the test file", "flows lists paths")
				continue
			}
			f.Flows = append(f.Flows, r.rel(s))
		}
	}
	if len(f.Flows) == 0 {
		f.Flows = []string{r.dir}
	}
	if n := root.Get("start"); n != nil {
		s, _ := n.Str()
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			r.errorf(n.Pos(), "write an RFC 3339 time, 2026-01-01T00:00:00Z", "start %q is not a time", s)
		}
		f.Start = t.UTC()
	}
	cs := root.Get("cases")
	if cs == nil || !cs.IsSeq() || len(cs.Items()) == 0 {
		r.errorf(root.Pos(), "add `cases:`, a list of cases each with a name", "the test file has no cases")
		return f
	}
	names := map[string]bool{}
	for _, cn := range cs.Items() {
		c := r.case1(cn)
		if c == nil {
			continue
		}
		if names[c.Name] {
			r.errorf(c.Pos, "give each case a name of its own", "case %q is named twice", c.Name)
		}
		names[c.Name] = true
		f.Cases = append(f.Cases, c)
	}
	return f
}

func (r *reader) rel(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(r.dir, p)
}

// list is n's items, or n itself when it is not a sequence.
func (r *reader) list(n *spec.Node) []*spec.Node {
	if n == nil {
		return nil
	}
	if n.IsSeq() {
		return n.Items()
	}
	return []*spec.Node{n}
}

func (r *reader) case1(n *spec.Node) *Case {
	if !n.IsMap() {
		r.errorf(n.Pos(), "write a case as a mapping with name, handlers, steps and expect", "a case is a mapping")
		return nil
	}
	r.keys(n, "a case", "name", "handlers", "steps", "expect")
	c := &Case{Pos: n.Pos(), Handlers: map[string]*Handler{}}
	c.Name, _ = n.Get("name").Str()
	if c.Name == "" {
		r.errorf(n.Pos(), "name it with a sentence saying what it shows", "a case has no name")
	}
	if hs := n.Get("handlers"); hs != nil {
		if !hs.IsMap() {
			r.errorf(hs.Pos(), "map each handler (plugin.handler, or a consumer's id or queue) to its outcomes", "handlers is a mapping")
		}
		for i, k := range hs.Keys() {
			key := fmt.Sprint(k.Value())
			h := &Handler{Key: key, Pos: k.Pos()}
			for _, on := range r.list(hs.Vals()[i]) {
				h.Outcomes = append(h.Outcomes, r.outcome(on)...)
			}
			c.Handlers[key] = h
		}
	}
	sn := n.Get("steps")
	if sn == nil || !sn.IsSeq() || len(sn.Items()) == 0 {
		r.errorf(n.Pos(), "add `steps:`, with a send and `run: until_idle`", "case %q has no steps", c.Name)
	} else {
		for _, st := range sn.Items() {
			if s := r.step(st); s != nil {
				c.Steps = append(c.Steps, s)
			}
		}
	}
	if en := n.Get("expect"); en != nil {
		c.Expect = r.expect(en)
	}
	return c
}

func (r *reader) duration(n *spec.Node, what string) time.Duration {
	s, ok := n.Str()
	if !ok {
		r.errorf(n.Pos(), "write a duration such as 30s, 5m or 1h", "%s is not a duration", what)
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		r.errorf(n.Pos(), "write a duration such as 30s, 5m or 1h", "%s %q is not a duration", what, s)
	}
	return d
}

func (r *reader) outcome(n *spec.Node) []Outcome {
	o := Outcome{Pos: n.Pos()}
	if s, ok := n.Str(); ok {
		switch s {
		case "echo", "return":
			return []Outcome{o}
		case "stop":
			o.Stop = true
			return []Outcome{o}
		}
		r.errorf(n.Pos(), "write echo, stop, or a mapping: return, fail, fatal or sleep", "unknown outcome %q", s)
		return nil
	}
	if !n.IsMap() || len(n.Keys()) != 1 {
		r.errorf(n.Pos(), "write one of: echo, stop, {return: PAYLOAD}, {fail: {times: N, error: TEXT}}, {fatal: TEXT}, {sleep: 90s}", "an outcome is one of return, stop, fail, fatal or sleep")
		return nil
	}
	v := n.Vals()[0]
	switch n.Keys()[0].Value() {
	case "return":
		raw, _ := json.Marshal(v.JSON())
		o.Return, o.hasReturn = raw, true
	case "stop":
		o.Stop = true
	case "fatal":
		o.Fatal, _ = v.Str()
		if o.Fatal == "" {
			o.Fatal = "fatal failure"
		}
	case "sleep":
		o.Sleep = r.duration(v, "sleep")
	case "fail":
		times := 1
		o.Fail = "failure"
		if s, ok := v.Str(); ok {
			o.Fail = s
		} else if v.IsMap() {
			r.keys(v, "fail", "times", "error")
			if t := v.Get("times"); t != nil {
				i, ok := t.Value().(int64)
				if !ok || i < 1 {
					r.errorf(t.Pos(), "write a whole number, 1 or more", "fail's times is not a count")
				}
				times = int(i)
			}
			if e, ok := v.Get("error").Str(); ok {
				o.Fail = e
			}
		}
		out := make([]Outcome, times)
		for i := range out {
			out[i] = o
		}
		return out
	default:
		r.errorf(n.Keys()[0].Pos(), "write return, stop, fail, fatal or sleep", "unknown outcome %q", fmt.Sprint(n.Keys()[0].Value()))
		return nil
	}
	return []Outcome{o}
}

func (r *reader) step(n *spec.Node) *Step {
	s := &Step{Pos: n.Pos()}
	if !n.IsMap() || len(n.Keys()) != 1 {
		r.errorf(n.Pos(), "write one of: send, advance, run: until_idle, expect", "a step is a mapping with one key")
		return nil
	}
	v := n.Vals()[0]
	switch n.Keys()[0].Value() {
	case "send":
		s.Send = r.send(v)
	case "advance":
		s.Advance = r.duration(v, "advance")
	case "run":
		if x, _ := v.Str(); x != "until_idle" {
			r.errorf(v.Pos(), "write `run: until_idle`", "run %q is not until_idle", x)
		}
		s.Idle = true
	case "expect":
		s.Expect = r.expect(v)
	default:
		r.errorf(n.Keys()[0].Pos(), "write send, advance, run or expect", "unknown step %q", fmt.Sprint(n.Keys()[0].Value()))
		return nil
	}
	return s
}

func (r *reader) send(n *spec.Node) *Send {
	s := &Send{Pos: n.Pos()}
	if !n.IsMap() {
		r.errorf(n.Pos(), "write {pipeline: NAME, payload: {...}}", "send is a mapping")
		return s
	}
	r.keys(n, "send", "pipeline", "itinerary", "saga", "exchange", "routing_key", "queue", "payload", "file", "reply_to", "in", "message_id")
	str := func(k string) string { v, _ := n.Get(k).Str(); return v }
	s.Target = decide.Target{Pipeline: str("pipeline"), Itinerary: str("itinerary"), Saga: str("saga"), Exchange: str("exchange"), RoutingKey: str("routing_key")}
	s.Queue, s.ReplyTo, s.ID = str("queue"), str("reply_to"), str("message_id")
	if s.Target == (decide.Target{}) && s.Queue == "" {
		r.errorf(n.Pos(), "say where: pipeline, itinerary, saga, queue, or exchange with routing_key", "send names no destination")
	}
	if in := n.Get("in"); in != nil {
		s.In = r.duration(in, "in")
	}
	switch p, fn := n.Get("payload"), n.Get("file"); {
	case p != nil && fn != nil:
		r.errorf(fn.Pos(), "keep one of them", "send has both payload and file")
	case p != nil:
		if txt, ok := p.Str(); ok && json.Valid([]byte(txt)) && strings.ContainsAny(strings.TrimSpace(txt)[:1], "{[") {
			s.Payload = []byte(txt)
		} else {
			s.Payload, _ = json.Marshal(p.JSON())
		}
	case fn != nil:
		name, _ := fn.Str()
		data, err := os.ReadFile(r.rel(name))
		if err != nil {
			r.errorf(fn.Pos(), "name a JSON file relative to the test file", "payload file %s cannot be read: %v", name, err)
		}
		s.Payload = data
	default:
		s.Payload = []byte("null")
	}
	return s
}
