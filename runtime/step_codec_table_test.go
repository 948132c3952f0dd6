package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/memory"
	"github.com/acemq/acemq-flow/test/testenv"
)

const codecTableFlow = `version: acemq.flow/v1
name: ct
defaults:
  retry: {max_attempts: 3, initial_delay: 1s, max_delay: 1s, jitter: 0}
types:
  In: {avro: {type: record, name: In, fields: [{name: id, type: string}]}}
  Out: {avro: {type: record, name: Out, fields: [{name: n, type: long}]}}
plugins:
  k: {command: ./k}
consumers:
  - {id: work, queue: ct.work, handler: k.work, input: In, output: Out}
`

// failingRegistry fails every call, as a store that cannot be reached.
type failingRegistry struct{ codec.Registry }

func (failingRegistry) SchemaByID(context.Context, int) (stores.Schema, bool, error) {
	return stores.Schema{}, false, errors.New("connection refused")
}

// The codec wrapper with a fake next step: what the step sees of a
// delivery, and what becomes of what it publishes.
func TestCodecStep(t *testing.T) {
	set, err := spec.Load(testenv.FlowFS(codecTableFlow), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	c := &pl.Consumers[0]
	reg, err := memory.Open(stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cd := codec.New(reg, codec.Options{})
	if err := cd.Register(t.Context(), set.Flows); err != nil {
		t.Fatal(err)
	}
	inAvro, inID, err := cd.Encode(t.Context(), c.File.Type("In"), []byte(`{"id":"a-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, outID, _ := cd.Encode(t.Context(), c.File.Type("Out"), []byte(`{"n":1}`))
	avroIn := decide.Message{MessageID: "m-1", ContentType: codec.ContentType, Body: inAvro,
		Headers: decide.Table{codec.HeaderSchemaID: codec.HeaderValue(inID)}}
	jsonIn := decide.Message{MessageID: "m-2", ContentType: "application/json", Body: []byte(`{"id":"j-1"}`), Headers: decide.Table{}}
	now := time.Now()
	output := func(body string) stepFunc {
		return func(_ context.Context, d *delivery) decide.Decision {
			return decide.Decide(c, nil, d.in, decide.Result{Payload: []byte(body)}, nil, now, 0)
		}
	}
	// What a step publishes onward: a new message of its output type, as
	// a pipeline step's output or a saga's step message is.
	onward := func(body string) stepFunc {
		return func(_ context.Context, d *delivery) decide.Decision {
			return decide.Decision{Outcome: decide.OutcomeAcknowledged, Publish: []decide.Publish{{Message: decide.Message{
				Exchange: "next", MessageID: "new-" + d.in.Env.MessageID, Type: "Out", ContentType: "application/json",
				Body: []byte(body), Headers: decide.Table{}}}}}
		}
	}
	retried := func(_ context.Context, d *delivery) decide.Decision {
		return decide.Retry(c, d.in, errors.New("try again"), now, 0)
	}
	for _, tc := range []struct {
		name     string
		reg      codec.Registry // nil: the working one
		in       decide.Message
		next     stepFunc
		seen     string // the body next must see; "" when it must not run
		outcome  string
		check    func(t *testing.T, p decide.Publish)
		inReason string
	}{
		{name: "an Avro delivery reaches the step as JSON, and a typed output leaves as Avro with its type's id",
			in: avroIn, next: onward(`{"n":7}`), seen: `{"id":"a-1"}`, outcome: decide.OutcomeAcknowledged,
			check: func(t *testing.T, p decide.Publish) {
				id, _, err := codec.ReadFrame(p.Body)
				if err != nil || id != outID || p.ContentType != codec.ContentType || p.Headers[codec.HeaderSchemaID] != codec.HeaderValue(outID) {
					t.Errorf("output: content type %q, header %v, frame id %d (%v); want Avro of Out, id %d", p.ContentType, p.Headers[codec.HeaderSchemaID], id, err, outID)
				}
			}},
		{name: "a retried delivery is republished with the Avro body, content type and id it arrived with",
			in: avroIn, next: retried, seen: `{"id":"a-1"}`, outcome: decide.OutcomeRetried,
			check: func(t *testing.T, p decide.Publish) {
				if string(p.Body) != string(inAvro) || p.ContentType != codec.ContentType || p.Headers[codec.HeaderSchemaID] != codec.HeaderValue(inID) {
					t.Errorf("retry: body % x, content type %q, header %v; want the delivery as it arrived", p.Body, p.ContentType, p.Headers[codec.HeaderSchemaID])
				}
			}},
		{name: "a reply carries no type and stays JSON",
			in: decide.Message{MessageID: "m-3", ReplyTo: "client", ContentType: codec.ContentType, Body: inAvro}, next: output(`{"n":7}`), seen: `{"id":"a-1"}`, outcome: decide.OutcomeAcknowledged,
			check: func(t *testing.T, p decide.Publish) {
				if string(p.Body) != `{"n":7}` || p.ContentType != "application/json" {
					t.Errorf("reply: %s (%s), want the JSON output", p.Body, p.ContentType)
				}
			}},
		{name: "a JSON delivery reaches the step unchanged",
			in: jsonIn, next: onward(`{"n":1}`), seen: `{"id":"j-1"}`, outcome: decide.OutcomeAcknowledged},
		{name: "an output that does not fit its Avro type dead-letters the delivery as it arrived",
			in: avroIn, next: onward(`{"n":"seven"}`), seen: `{"id":"a-1"}`, outcome: decide.OutcomeDeadLettered, inReason: "output: ",
			check: func(t *testing.T, p decide.Publish) {
				if p.RoutingKey != "ct.work.dlq" || string(p.Body) != string(inAvro) {
					t.Errorf("dead letter to %s with body % x, want ct.work.dlq with the Avro it arrived with", p.RoutingKey, p.Body)
				}
			}},
		{name: "an unknown schema id is dead-lettered at once, naming the id and the queue",
			in: decide.Message{MessageID: "m-4", ContentType: codec.ContentType, Body: codec.AppendFrame(nil, 777, []byte{2, 'x'})}, next: retried,
			outcome: decide.OutcomeDeadLettered, inReason: `queue "ct.work": schema id 777`},
		{name: "a body that is not in the framing is dead-lettered",
			in: decide.Message{MessageID: "m-5", ContentType: codec.ContentType, Body: []byte("{}")}, next: retried,
			outcome: decide.OutcomeDeadLettered, inReason: "not Avro in the Confluent framing"},
		{name: "a registry that cannot be reached is retried",
			reg: failingRegistry{reg}, in: decide.Message{MessageID: "m-6", ContentType: codec.ContentType, Body: codec.AppendFrame(nil, 999, []byte{2, 'x'})}, next: retried,
			outcome: decide.OutcomeRetried, inReason: "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			use := cd
			if tc.reg != nil {
				use = codec.New(tc.reg, codec.Options{})
			}
			g := &group{r: &Runtime{codec: use}, c: c}
			var seen string
			ran := false
			step := g.codecStep(func(ctx context.Context, d *delivery) decide.Decision {
				ran, seen = true, string(d.in.Body)
				if d.in.Props.ContentType != "application/json" {
					t.Errorf("the step saw content type %q, want application/json", d.in.Props.ContentType)
				}
				return tc.next(ctx, d)
			})
			dec := step(t.Context(), &delivery{in: decide.InboundOf(tc.in)})
			if tc.seen == "" && ran {
				t.Fatalf("the step ran on %s; want the wrapper to decide alone", seen)
			}
			if tc.seen != "" && seen != tc.seen {
				t.Fatalf("the step saw %q, want %q", seen, tc.seen)
			}
			if dec.Outcome != tc.outcome || !strings.Contains(dec.Reason, tc.inReason) {
				t.Fatalf("outcome %s, reason %q; want %s with %q", dec.Outcome, dec.Reason, tc.outcome, tc.inReason)
			}
			if tc.check != nil {
				if len(dec.Publish) == 0 {
					t.Fatal("nothing published")
				}
				tc.check(t, dec.Publish[0])
			}
		})
	}
}
