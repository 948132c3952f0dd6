package flowdiff

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

const base = `version: acemq.flow/v1
name: shop
plugins:
  k: {command: ./k}
types:
  Order:
    type: object
    required: [id]
    properties: {id: {type: string}, total: {type: number}}
pipelines:
  - name: p
    input: Order
    steps:
      - {name: a, handler: k.a, output: Order}
      - {name: b, handler: k.b, output: Order}
      - {name: c, handler: k.c, output: Order}
itineraries:
  - name: it
    stops:
      - {name: x, exchange: ev, routing_key: k.x}
      - {name: y, exchange: ev, routing_key: k.y}
consumers:
  - id: cx
    queue: q.x
    handler: k.x
    bind: [{exchange: ev, routing_key: k.x}]
    declare: {type: quorum}
  - id: cy
    queue: q.y
    handler: k.y
    idempotent: true
    bind: [{exchange: ev, routing_key: k.y}]
    declare: {type: quorum}
sagas:
  - name: s
    steps:
      - {name: pay, handler: k.pay, compensate: k.refund}
      - {name: ship, handler: k.ship}
topology:
  exchanges: [{name: ev, type: topic}]
`

// load loads and compiles flow files held in memory.
func load(t *testing.T, files map[string]string) Side {
	t.Helper()
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data)}
	}
	set, err := spec.Load(fsys, ".")
	if err != nil {
		t.Fatalf("spec.Load: %v", err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatalf("plan.Compile: %v", err)
	}
	return Side{Flows: set.Flows, Plan: pl, ReadFile: func(name string) ([]byte, error) { return fs.ReadFile(fsys, name) }}
}

func edit(t *testing.T, s string, pairs ...string) string {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("the base flow lacks %q", pairs[i])
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

// kinds lists the changes as "kind" for breaking ones and "(kind)" for the
// others, in order.
func kinds(cs Changes) []string {
	var out []string
	for _, c := range cs {
		if c.Breaking {
			out = append(out, string(c.Kind))
		} else {
			out = append(out, "("+string(c.Kind)+")")
		}
	}
	return out
}

func TestCompare(t *testing.T) {
	cases := []struct {
		name  string
		edits []string
		want  []string
		// check looks further at the one change of kind first.
		first Kind
		check func(t *testing.T, c Change)
	}{
		{name: "identical flows have no change", want: nil},
		{
			name:  "a removed pipeline step strands its queue and the queues before it",
			edits: []string{"      - {name: b, handler: k.b, output: Order}\n", ""},
			want:  []string{"step-removed"},
			first: StepRemoved,
			check: func(t *testing.T, c Change) {
				if !c.Old || c.Pos.Line != 15 || c.Pos.Col != 10 {
					t.Errorf("position %v (old %t), want f.yaml:15:10 in the old file", c.Pos, c.Old)
				}
				if !slices.Contains(c.Queues, "p.b") || !slices.Contains(c.Queues, "p.a.retry.2s") || slices.Contains(c.Queues, "p.c") {
					t.Errorf("queues %v, want p.a's and p.b's, not p.c's", c.Queues)
				}
			},
		},
		{
			name:  "a renamed step is a rename at the new step",
			edits: []string{"{name: b, handler: k.b", "{name: bb, handler: k.b"},
			want:  []string{"step-renamed"},
			first: StepRenamed,
			check: func(t *testing.T, c Change) {
				if c.Old || c.Pos.Line != 15 || !strings.Contains(c.Msg, `from "p.b" to "p.bb"`) {
					t.Errorf("got %s (old %t), want line 15 of the new file naming both queues", c, c.Old)
				}
			},
		},
		{
			name:  "swapped steps reorder the route",
			edits: []string{"{name: b, handler: k.b", "{name: TMP, handler: k.b", "{name: c, handler: k.c", "{name: b, handler: k.c", "{name: TMP, handler: k.b", "{name: c, handler: k.b"},
			want:  []string{"route-reordered", "(handler-changed)", "(handler-changed)"},
			first: RouteReordered,
			check: func(t *testing.T, c Change) {
				if !strings.Contains(c.Msg, "a, b, c → a, c, b") {
					t.Errorf("message %q lacks the two orders", c.Msg)
				}
			},
		},
		{
			name:  "an added step breaks nothing",
			edits: []string{"      - {name: c, handler: k.c, output: Order}\n", "      - {name: c, handler: k.c, output: Order}\n      - {name: d, handler: k.d, output: Order}\n"},
			want:  []string{"(step-added)"},
		},
		{
			name:  "a step's queue type changed is refused by the broker",
			edits: []string{"{name: b, handler: k.b, output: Order}", "{name: b, handler: k.b, output: Order, queue_type: classic}"},
			want:  []string{"queue-type-changed"},
			first: QueueTypeChanged,
			check: func(t *testing.T, c Change) {
				if len(c.Queues) != 0 || !strings.Contains(c.Msg, "from quorum to classic") || !strings.Contains(c.Msg, `"p.b.retry.2s"`) {
					t.Errorf("got %s, queues %v; want the type change with its retry queues and no queue to settle", c, c.Queues)
				}
			},
		},
		{
			name:  "a queue argument added is refused by the broker",
			edits: []string{"    declare: {type: quorum}\n  - id: cy", "    declare: {type: quorum, arguments: {x-message-ttl: 60000}}\n  - id: cy"},
			want:  []string{"queue-arguments-changed"},
			first: QueueArgsChanged,
			check: func(t *testing.T, c Change) {
				if !strings.Contains(c.Msg, "x-message-ttl 60000 added") {
					t.Errorf("message %q lacks the argument", c.Msg)
				}
			},
		},
		{
			name:  "a shorter retry ladder orphans its rungs",
			edits: []string{"{name: a, handler: k.a, output: Order}", "{name: a, handler: k.a, output: Order, retry: {max_attempts: 2}}"},
			want:  []string{"retry-rungs-orphaned"},
			first: RetryRungsOrphaned,
			check: func(t *testing.T, c Change) {
				if want := []string{"p.a.retry.16s", "p.a.retry.4s", "p.a.retry.8s"}; !slices.Equal(c.Queues, want) {
					t.Errorf("queues %v, want %v", c.Queues, want)
				}
			},
		},
		{
			name:  "a removed consumer strands its queue",
			edits: []string{"  - id: cx\n    queue: q.x\n    handler: k.x\n    bind: [{exchange: ev, routing_key: k.x}]\n    declare: {type: quorum}\n", ""},
			want:  []string{"consumer-removed"},
			first: ConsumerRemoved,
			check: func(t *testing.T, c Change) {
				if !c.Old || c.Queues[0] != "q.x" || !slices.Contains(c.Queues, "q.x.dlq") {
					t.Errorf("got %s, queues %v; want the old position and q.x with its ladder", c, c.Queues)
				}
			},
		},
		{
			name:  "renaming an idempotent consumer breaks its deduplication",
			edits: []string{"id: cy", "id: cz"},
			want:  []string{"consumer-renamed"},
		},
		{
			name:  "renaming a consumer that is not idempotent breaks nothing",
			edits: []string{"id: cx", "id: cw"},
			want:  []string{"(consumer-renamed)"},
		},
		{
			name:  "a binding removed from a kept consumer",
			edits: []string{"bind: [{exchange: ev, routing_key: k.x}]", "bind: [{exchange: ev, routing_key: k.xx}]"},
			want:  []string{"binding-removed", "(binding-added)"},
		},
		{
			name:  "an exchange's type changed",
			edits: []string{"{name: ev, type: topic}", "{name: ev, type: direct}"},
			want:  []string{"exchange-type-changed"},
		},
		{
			name:  "under apply: dry-run nothing is declared, so nothing is refused",
			edits: []string{"topology:\n  exchanges: [{name: ev, type: topic}]", "topology:\n  apply: dry-run\n  exchanges: [{name: ev, type: direct}]"},
			want:  []string{"(exchange-type-changed)"},
			first: ExchangeTypeChanged,
			check: func(t *testing.T, c Change) {
				if c.Text() != `exchange "ev" changes type from topic to direct; its file has apply: dry-run, so the runtime declares nothing `+
					`and starts; the exchange on the broker keeps its old declaration until someone changes it` {
					t.Errorf("got %q", c.Text())
				}
			},
		},
		{
			name:  "a type that requires a new field is narrowed, once for all its readers",
			edits: []string{"required: [id]", "required: [id, total]"},
			want:  []string{"type-narrowed"},
			first: TypeNarrowed,
			check: func(t *testing.T, c Change) {
				if c.Pos.Line != 6 || !strings.Contains(c.Msg, `step "a" of pipeline "p", step "b" of pipeline "p", step "c" of pipeline "p"`) ||
					!strings.Contains(c.Msg, "at $.total, the property is now required") {
					t.Errorf("got %s; want it at the type (line 6) naming the three readers and the property", c)
				}
			},
		},
		{
			name:  "a type that requires less is widened",
			edits: []string{"required: [id]", "required: []"},
			want:  []string{"(type-widened)"},
		},
		{
			name:  "a field's type narrowed from number to integer",
			edits: []string{"total: {type: number}", "total: {type: integer}"},
			want:  []string{"type-narrowed"},
			first: TypeNarrowed,
			check: func(t *testing.T, c Change) {
				if !strings.Contains(c.Msg, "at $.total, the writer may write number") {
					t.Errorf("message %q does not name $.total", c.Msg)
				}
			},
		},
		{
			name:  "a removed itinerary stop",
			edits: []string{"      - {name: y, exchange: ev, routing_key: k.y}\n", ""},
			want:  []string{"stop-removed"},
			first: StopRemoved,
			check: func(t *testing.T, c Change) {
				if !slices.Contains(c.Queues, "q.x") || !slices.Contains(c.Queues, "q.y") {
					t.Errorf("queues %v, want the queues of both stops", c.Queues)
				}
			},
		},
		{
			name:  "swapped itinerary stops",
			edits: []string{"{name: x, exchange: ev, routing_key: k.x}", "{name: TMP}", "{name: y, exchange: ev, routing_key: k.y}", "{name: x, exchange: ev, routing_key: k.x}", "{name: TMP}", "{name: y, exchange: ev, routing_key: k.y}"},
			want:  []string{"route-reordered"},
		},
		{
			name:  "a stop sent elsewhere",
			edits: []string{"{name: y, exchange: ev, routing_key: k.y}", "{name: y, exchange: ev, routing_key: k.z}"},
			want:  []string{"stop-moved"},
		},
		{
			name:  "a removed saga step",
			edits: []string{"      - {name: ship, handler: k.ship}\n", ""},
			want:  []string{"saga-step-removed"},
		},
		{
			name:  "a saga step added breaks the instances running, whose step records are by position",
			edits: []string{"      - {name: ship, handler: k.ship}\n", "      - {name: ship, handler: k.ship}\n      - {name: mail, handler: k.mail}\n"},
			want:  []string{"saga-step-added"},
		},
		{
			name:  "a consumer no longer idempotent orphans its in-progress rung",
			edits: []string{"    handler: k.y\n    idempotent: true\n", "    handler: k.y\n"},
			want:  []string{"retry-rungs-orphaned", "(idempotent-changed)"},
			first: RetryRungsOrphaned,
			check: func(t *testing.T, c Change) {
				if !strings.Contains(c.Msg, `consumer "cy" is no longer idempotent, so its in-progress rung "q.y.retry.1s" is no longer declared`) {
					t.Errorf("message %q does not name the in-progress rung", c.Msg)
				}
			},
		},
		{
			name:  "a removed compensation",
			edits: []string{"{name: pay, handler: k.pay, compensate: k.refund}", "{name: pay, handler: k.pay}"},
			want:  []string{"compensation-removed"},
			first: CompensationRemoved,
			check: func(t *testing.T, c Change) {
				if c.Queues[0] != "s.pay.compensate" {
					t.Errorf("queues %v, want s.pay.compensate first", c.Queues)
				}
			},
		},
		{
			name:  "settings and descriptions break nothing",
			edits: []string{"{name: a, handler: k.a, output: Order}", "{name: a, handler: k.a, output: Order, concurrency: 3, prefetch: 7, description: first}"},
			want:  []string{"(concurrency-changed)", "(description-changed)", "(prefetch-changed)"},
		},
		{
			name: "a removed pipeline is one change",
			edits: []string{"  - name: p\n    input: Order\n    steps:\n      - {name: a, handler: k.a, output: Order}\n      - {name: b, handler: k.b, output: Order}\n      - {name: c, handler: k.c, output: Order}\n",
				"  - name: p\n    input: Order\n    steps:\n      - {name: a, handler: k.a, output: Order}\n      - {name: b, handler: k.b, output: Order}\n      - {name: c, handler: k.c, output: Order}\n  - name: p2\n    steps:\n      - {name: a, handler: k.a}\n"},
			want: []string{"(pipeline-added)"},
		},
	}
	old := load(t, map[string]string{"f.yaml": base})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			newer := load(t, map[string]string{"f.yaml": edit(t, base, tc.edits...)})
			got := Compare(old, newer)
			if k := kinds(got); !slices.Equal(k, tc.want) {
				t.Fatalf("Compare: changes %v, want %v:\n%s", k, tc.want, dump(got))
			}
			if tc.check != nil {
				i := slices.IndexFunc(got, func(c Change) bool { return c.Kind == tc.first })
				tc.check(t, got[i])
			}
			if back := Compare(newer, old); len(tc.want) > 0 && len(back) == 0 {
				t.Errorf("Compare the other way round found nothing")
			}
		})
	}
}

func TestCompareRemovedPipeline(t *testing.T) {
	newer := load(t, map[string]string{"f.yaml": base})
	older := load(t, map[string]string{"f.yaml": edit(t, base, "itineraries:", "  - name: gone\n    steps:\n      - {name: a, handler: k.a}\n      - {name: b, handler: k.b}\nitineraries:")})
	got := Compare(older, newer)
	if k := kinds(got); !slices.Equal(k, []string{"pipeline-removed"}) {
		t.Fatalf("Compare: %v, want one pipeline-removed:\n%s", k, dump(got))
	}
	if want := []string{"gone.a", "gone.b"}; !slices.Contains(got[0].Queues, want[0]) || !slices.Contains(got[0].Queues, want[1]) {
		t.Errorf("queues %v, want both steps' queues", got[0].Queues)
	}
}

// TestCompareTypesThroughRefs: a type written as a $ref to a schema file
// is compared by the file's content, the files of each side read through
// its own ReadFile.
func TestCompareTypesThroughRefs(t *testing.T) {
	flow := edit(t, base, "  Order:\n    type: object\n    required: [id]\n    properties: {id: {type: string}, total: {type: number}}\n",
		"  Order: {$ref: schemas/order.json}\n")
	schema := `{"type": "object", "required": ["id"], "properties": {"id": {"$ref": "#/$defs/id"}}, "$defs": {"id": {"type": "string"}}}`
	old := load(t, map[string]string{"f.yaml": flow, "schemas/order.json": schema})
	same := load(t, map[string]string{"f.yaml": flow, "schemas/order.json": strings.Replace(schema, `{"type": "string"}`, `{"type": "string", "description": "an order id"}`, 1)})
	if got := Compare(old, same); len(got) != 0 {
		t.Errorf("Compare with the same schema file: %s, want nothing", dump(got))
	}
	narrower := load(t, map[string]string{"f.yaml": flow, "schemas/order.json": strings.Replace(schema, `{"type": "string"}`, `{"type": "string", "maxLength": 8}`, 1)})
	got := Compare(old, narrower)
	if k := kinds(got); !slices.Equal(k, []string{"type-narrowed"}) || !strings.Contains(got[0].Msg, "at $.id, maxLength 8") {
		t.Fatalf("Compare with a narrower $defs entry: %v, want type-narrowed at $.id:\n%s", k, dump(got))
	}
}

func TestSettle(t *testing.T) {
	old := load(t, map[string]string{"f.yaml": base})
	newer := load(t, map[string]string{"f.yaml": edit(t, base,
		"      - {name: c, handler: k.c, output: Order}\n", "",
		"{name: ev, type: topic}", "{name: ev, type: direct}")})
	depths := map[string]int{"p.b.retry.4s": 0}
	asked := map[string]int{}
	depth := func(q string) (int, bool, error) {
		asked[q]++
		n, ok := depths[q]
		return n, ok, nil
	}
	cs := Compare(old, newer)
	if err := Settle(cs, depth); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		switch c.Kind {
		case StepRemoved:
			if c.Severity() != "warning" || !c.Drained || !strings.Contains(c.Text(), "holds no ready message") {
				t.Errorf("step-removed with every queue empty: severity %s, %q; want a warning saying so", c.Severity(), c.Text())
			}
		case ExchangeTypeChanged:
			if c.Severity() != "error" {
				t.Errorf("exchange-type-changed: severity %s, want error whatever the depths", c.Severity())
			}
		}
	}
	for q, n := range asked {
		if n != 1 {
			t.Errorf("queue %s asked %d times, want once", q, n)
		}
	}
	depths["p.b.retry.4s"] = 3
	cs = Compare(old, newer)
	if err := Settle(cs, depth); err != nil {
		t.Fatal(err)
	}
	if !cs.Breaking() {
		t.Errorf("a message waiting in p.b.retry.4s: Breaking() = false, want true")
	}
	if err := Settle(Compare(old, newer), func(string) (int, bool, error) { return 0, false, fmt.Errorf("refused") }); err == nil ||
		!strings.Contains(err.Error(), "read the depth of queue") {
		t.Errorf("Settle with a failing depth: %v, want an error naming the queue", err)
	}
}

func dump(cs Changes) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "  %s\n", c)
	}
	return b.String()
}

func TestRoutes(t *testing.T) {
	cases := []struct {
		typ, binding, key string
		want              bool
	}{
		{"topic", "order.charge", "order.charge", true},
		{"topic", "order.*", "order.charge", true},
		{"topic", "order.*", "order.charge.eu", false},
		{"topic", "order.#", "order.charge.eu", true},
		{"topic", "#", "anything.at.all", true},
		{"topic", "#.eu", "order.charge.eu", true},
		{"topic", "order.#.eu", "order.eu", true},
		{"direct", "order.*", "order.charge", false},
		{"", "order.*", "order.charge", true},
		{"", "order.x", "order.charge", false},
	}
	for _, tc := range cases {
		if got := routes(tc.typ, tc.binding, tc.key); got != tc.want {
			t.Errorf("routes(%q, %q, %q) = %t, want %t", tc.typ, tc.binding, tc.key, got, tc.want)
		}
	}
}

// TestCompareExamplesWithThemselves: every example flow compared with
// itself has no change, and the change check of one against another
// names only what differs.
func TestCompareExamplesWithThemselves(t *testing.T) {
	set, err := spec.LoadPaths(spec.Options{}, "../../examples/flows")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	side := Side{Flows: set.Flows, Plan: pl, ReadFile: os.ReadFile}
	if got := Compare(side, side); len(got) != 0 {
		t.Errorf("Compare(examples, examples):\n%s\nwant no change", dump(got))
	}
	if got := Compare(Side{}, side); len(got) == 0 || got.Breaking() {
		t.Errorf("Compare(nothing, examples) = %v, want additions only", kinds(got))
	}
	if got := Compare(side, Side{}); !got.Breaking() {
		t.Errorf("Compare(examples, nothing) = %v, want removals that break", kinds(got))
	}
}

func TestCompareAvroTypes(t *testing.T) {
	flow := edit(t, base, "  Order:\n    type: object\n    required: [id]\n    properties: {id: {type: string}, total: {type: number}}\n",
		"  Order: {avro: {$ref: schemas/order.avsc}}\n")
	schema := `{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}%s]}`
	old := load(t, map[string]string{"f.yaml": flow, "schemas/order.avsc": fmt.Sprintf(schema, "")})
	documented := load(t, map[string]string{"f.yaml": flow, "schemas/order.avsc": fmt.Sprintf(schema, `, {"name": "note", "type": "string", "default": "", "doc": "for people"}`)})
	if got := Compare(old, documented); slices.Contains(kinds(got), "type-narrowed") {
		t.Errorf("Compare with a field added with a default: %s, want no narrowing", dump(got))
	}
	narrower := load(t, map[string]string{"f.yaml": flow, "schemas/order.avsc": fmt.Sprintf(schema, `, {"name": "total", "type": "double"}`)})
	got := Compare(old, narrower)
	if k := kinds(got); !slices.Equal(k, []string{"type-narrowed"}) || !strings.Contains(got[0].Msg, "total") {
		t.Fatalf("Compare with a field added without a default: %v, want type-narrowed naming total:\n%s", k, dump(got))
	}
	json := load(t, map[string]string{"f.yaml": base})
	if k := kinds(Compare(json, old)); !slices.Equal(k, []string{"type-narrowed"}) {
		t.Errorf("Compare from a JSON Schema type to an Avro one: %v, want type-narrowed", k)
	}
}
