package flowtest

import (
	"strings"
	"testing"
)

func TestHarnessCases(t *testing.T) {
	f, ds := ReadFile("testdata/harness/harness.flowtest.yaml")
	if len(ds) > 0 {
		t.Fatalf("ReadFile(harness.flowtest.yaml): %v", ds)
	}
	r := Run(t.Context(), f, Options{})
	if len(r.Diags) > 0 {
		t.Fatalf("Run(harness.flowtest.yaml): the flows do not load: %v", r.Diags)
	}
	for _, c := range r.Cases {
		t.Run(c.Case.Name, func(t *testing.T) {
			for _, fl := range c.Failures {
				t.Errorf("%s: %s", fl.Pos, fl.Message())
			}
		})
	}
}

// inline runs one case written in the harness's folder (so that its flows
// are found) and returns its failures, one line each.
func inline(t *testing.T, text string) []string {
	t.Helper()
	f, ds := Parse("testdata/harness/inline.flowtest.yaml", []byte("version: acemq.flowtest/v1\ncases:\n"+text))
	if len(ds) > 0 {
		t.Fatalf("Parse: %v", ds)
	}
	r := Run(t.Context(), f, Options{})
	if len(r.Diags) > 0 {
		t.Fatalf("Run: %v", r.Diags)
	}
	var out []string
	for _, fl := range r.Cases[0].Failures {
		out = append(out, fl.Pos.String()+": "+fl.Message())
	}
	return out
}

func TestExpectationsThatDoNotHoldFail(t *testing.T) {
	cases := []struct {
		name string
		text string
		want []string
	}{
		{
			name: "a route with a step too few fails at the route",
			text: `  - name: x
    steps: [{send: {pipeline: later, payload: {id: a}}}, {run: until_idle}]
    expect: {route: [take]}
`,
			want: []string{`testdata/harness/inline.flowtest.yaml:5:21: route: expected 1 (["take"]), got 2 (["take","check"])`},
		},
		{
			name: "a dead letter no list names fails the case",
			text: `  - name: x
    handlers: {work.take: {fatal: broken}}
    steps: [{send: {pipeline: later, payload: {id: a}}}, {run: until_idle}]
`,
			want: []string{`testdata/harness/inline.flowtest.yaml:3:5: dead letters: expected none (the case names no dead_letters), got [{"attempt":1,"error":"broken","kind":"fatal","payload":{"id":"a"},"queue":"later.take.dlq"}]`},
		},
		{
			name: "an empty list means none: one retry fails it",
			text: `  - name: x
    handlers: {work.take: [{fail: once}, echo]}
    steps: [{send: {pipeline: later, payload: {id: a}}}, {run: until_idle}]
    expect: {retries: []}
`,
			want: []string{`testdata/harness/inline.flowtest.yaml:6:23: retries: expected 0 ([]), got 1 ([{"attempt":2,"delay":"2s","queue":"later.take"}])`},
		},
		{
			name: "a wrong delay is named with both values",
			text: `  - name: x
    handlers: {work.take: [{fail: once}, echo]}
    steps: [{send: {pipeline: later, payload: {id: a}}}, {run: until_idle}]
    expect:
      retries: [{queue: later.take, attempt: 2, delay: 5s}]
`,
			want: []string{`testdata/harness/inline.flowtest.yaml:7:56: retries, item 1, delay: expected "5s", got "2s"`},
		},
		{
			name: "a check before the clock moved sees nothing delayed yet",
			text: `  - name: x
    steps:
      - send: {pipeline: later, payload: {id: a}}
      - expect: {route: [take, check]}
      - run: until_idle
`,
			want: []string{`testdata/harness/inline.flowtest.yaml:6:25: route: expected 2 (["take","check"]), got 1 (["take"])`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := inline(t, tc.text)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestParseRefusesWhatItCannotRun(t *testing.T) {
	cases := []struct {
		name, text, want string
	}{
		{"an unknown version", "version: acemq.flowtest/v9\ncases: [{name: x, steps: [{run: until_idle}]}]\n", `x.flowtest.yaml:1:10: error: the test file's version is "acemq.flowtest/v9", not acemq.flowtest/v1`},
		{"an unknown step", "version: acemq.flowtest/v1\ncases:\n  - name: x\n    steps: [{wait: 3s}]\n", `x.flowtest.yaml:4:14: error: unknown step "wait"`},
		{"an unknown outcome", "version: acemq.flowtest/v1\ncases:\n  - name: x\n    handlers: {a.b: explode}\n    steps: [{run: until_idle}]\n", `x.flowtest.yaml:4:21: error: unknown outcome "explode"`},
		{"a duration that is not one", "version: acemq.flowtest/v1\ncases:\n  - name: x\n    steps: [{advance: soon}]\n", `x.flowtest.yaml:4:23: error: advance "soon" is not a duration`},
		{"a send to nowhere", "version: acemq.flowtest/v1\ncases:\n  - name: x\n    steps: [{send: {payload: 1}}]\n", `x.flowtest.yaml:4:21: error: send names no destination`},
		{"a case twice", "version: acemq.flowtest/v1\ncases:\n  - {name: x, steps: [{run: until_idle}]}\n  - {name: x, steps: [{run: until_idle}]}\n", `x.flowtest.yaml:4:6: error: case "x" is named twice`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ds := Parse("x.flowtest.yaml", []byte(tc.text))
			if len(ds) == 0 || !strings.HasPrefix(ds[0].String(), tc.want) {
				t.Errorf("Parse: %v, want the first to start %q", ds, tc.want)
			}
		})
	}
}

func TestTopicMatch(t *testing.T) {
	cases := []struct {
		pattern, key string
		want         bool
	}{
		{"job.first", "job.first", true},
		{"job.*", "job.first", true},
		{"job.*", "job.first.more", false},
		{"job.#", "job", true},
		{"job.#", "job.a.b.c", true},
		{"#.last", "a.b.last", true},
		{"#", "", true},
		{"*.b.#", "a.b", true},
		{"*.b", "b", false},
	}
	for _, tc := range cases {
		if got := matches("topic", tc.pattern, tc.key); got != tc.want {
			t.Errorf("matches(topic, %q, %q) = %v, want %v", tc.pattern, tc.key, got, tc.want)
		}
	}
}
