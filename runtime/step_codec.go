package runtime

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// jsonContentType is the content_type of the JSON a handler sees and
// returns.
const jsonContentType = "application/json"

// codecStep is the Avro codec around the rest of the step (FLOW-FORMAT §6),
// inside the claim check: handlers and plugins always see JSON.
//
// A delivery in the Confluent framing (by content_type, or a body starting
// with the magic byte and no content_type) is decoded by its writer's
// schema id and resolved to the consumer's input type when that is Avro
// (else read by the writer's schema alone), before the payload checks read
// it. A message that cannot be decoded (not framed, an unknown id, data
// that does not read, a writer that does not resolve to the reader) is
// dead-lettered as fatal, its reason naming the id and the queue; a
// registry that cannot be reached is retried through the ladder.
//
// What the decision publishes: the delivery republished as it arrived (a
// retry, a dead letter, a park: the same message id) carries the Avro body
// it arrived with, never the JSON; a new message whose type (the AMQP
// `type` a step's output and a saga's step message carry) is an Avro type
// of the consumer's flow is encoded by that type's schema, with its id.
// Output that does not fit its type is dead-lettered as fatal. Replies
// carry no type and stay JSON, as their content_type says.
func (g *group) codecStep(next stepFunc) stepFunc {
	cd := g.r.codec
	if cd == nil {
		return next
	}
	reader := avroTypeOf(g.c.File, g.c.Input)
	return func(ctx context.Context, d *delivery) decide.Decision {
		orig := d.in
		var decoded []byte
		if codec.IsAvro(orig.Props.ContentType, orig.Body) {
			body, _, err := cd.Decode(ctx, reader, orig.Body)
			if err != nil {
				if codec.Fatal(err) {
					dec := decide.DeadLetter(g.c, orig, decide.KindFatal, fmt.Sprintf("queue %q: %v", g.c.Queue, err), time.Now())
					for i := range dec.Publish {
						if dec.Publish[i].BestEffort {
							// The reply carries the body as it came: say so.
							dec.Publish[i].ContentType = orig.Props.ContentType
						}
					}
					return dec
				}
				return decide.Retry(g.c, orig, fmt.Errorf("schema registry: %w", err), time.Now(), rand.Float64())
			}
			m := orig.Props
			m.Body, m.ContentType = body, jsonContentType
			if _, ok := m.Headers[codec.HeaderSchemaID]; ok {
				m.Headers = withoutHeader(m.Headers, codec.HeaderSchemaID)
			}
			d.in = decide.InboundOf(m)
			// Decoded by the input type itself, the JSON fits it: the
			// payload checks need not parse it again.
			d.in.Typed = reader != nil
			decoded = body
		}
		// restore gives the delivery republished (the same message id) the
		// Avro body it arrived with.
		restore := func(dec decide.Decision) decide.Decision {
			for i := range dec.Publish {
				if p := &dec.Publish[i].Message; decoded != nil && p.MessageID == orig.Env.MessageID && bytes.Equal(p.Body, decoded) {
					restoreAvro(p, orig.Props)
				}
			}
			return dec
		}
		dec := restore(next(ctx, d))
		// What follows the decision (a publish the broker refuses turned
		// into a dead letter or a retry, group.publishFailed) republishes
		// the delivery as it arrived.
		jsonIn := d.in
		d.in = orig
		for i := range dec.Publish {
			p := &dec.Publish[i].Message
			if p.MessageID == orig.Env.MessageID {
				continue // the delivery itself, as it arrived
			}
			t := avroTypeOf(g.c.File, p.Type)
			if t == nil || codec.IsAvro(p.ContentType, p.Body) {
				continue
			}
			bin, id, err := cd.Encode(ctx, t, p.Body)
			if err != nil {
				if codec.Fatal(err) {
					return restore(decide.DeadLetter(g.c, jsonIn, decide.KindFatal, "output: "+err.Error(), time.Now()))
				}
				// Nothing is published: the delivery is tried again, as it
				// arrived, once the registry answers.
				return restore(decide.Retry(g.c, jsonIn, fmt.Errorf("schema registry: %w", err), time.Now(), rand.Float64()))
			}
			p.Body, p.ContentType = bin, codec.ContentType
			// A new message's headers are the decision's own table.
			if p.Headers == nil {
				p.Headers = decide.Table{}
			}
			p.Headers[codec.HeaderSchemaID] = codec.HeaderValue(id)
		}
		return dec
	}
}

// restoreAvro gives p, a republish of a delivery decoded from Avro, the
// body, content_type and schema id header the delivery arrived with.
func restoreAvro(p *decide.Message, arrived decide.Message) {
	p.Body, p.ContentType = arrived.Body, arrived.ContentType
	if v, ok := arrived.Headers[codec.HeaderSchemaID]; ok {
		h := make(decide.Table, len(p.Headers)+1)
		maps.Copy(h, p.Headers)
		h[codec.HeaderSchemaID] = v
		p.Headers = h
	}
}

func withoutHeader(h decide.Table, name string) decide.Table {
	out := make(decide.Table, len(h))
	for k, v := range h {
		if k != name {
			out[k] = v
		}
	}
	return out
}

// avroTypeOf returns type name of flow f when it is an Avro type, else nil.
func avroTypeOf(f *spec.Flow, name string) *spec.Type {
	if f == nil || name == "" || name == spec.OutputNone {
		return nil
	}
	if t := f.Type(name); t.IsAvro() {
		return t
	}
	return nil
}

// planFlows returns the flow files pl's entries come from, each once, in
// the order first met.
func planFlows(pl *plan.Plan) []*spec.Flow {
	var out []*spec.Flow
	add := func(f *spec.Flow) {
		if f != nil && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	for i := range pl.Consumers {
		add(pl.Consumers[i].File)
	}
	for i := range pl.Pipelines {
		add(pl.Pipelines[i].File)
	}
	for i := range pl.Itineraries {
		add(pl.Itineraries[i].File)
	}
	for i := range pl.Sagas {
		add(pl.Sagas[i].File)
	}
	return out
}

// avroTypes returns the Avro types of flows, as "<type> (<pos>)".
func avroTypes(flows []*spec.Flow) []string {
	var out []string
	for _, f := range flows {
		for _, t := range f.Types {
			if t.IsAvro() {
				out = append(out, fmt.Sprintf("%s (%s)", t.Name, t.Pos))
			}
		}
	}
	return out
}

// NeedsRegistry reports whether pl's flows have an Avro type, so that the
// runtime needs a schema registry (Options.Registry).
func NeedsRegistry(pl *plan.Plan) bool { return len(avroTypes(planFlows(pl))) > 0 }

// newCodec returns the codec of a plan with Avro types, over the schema
// registry opts names (nil for a plan without any). It does no I/O.
func newCodec(pl *plan.Plan, opts Options) (*codec.Codec, error) {
	types := avroTypes(planFlows(pl))
	if len(types) == 0 {
		return nil, nil
	}
	if opts.Registry == nil {
		return nil, fmt.Errorf("the flows have Avro types (%s), whose schemas are kept in the schema registry, and no registry is configured; run with --store (the registry is a store: postgres://… or sqlite:PATH)", strings.Join(types, ", "))
	}
	return codec.New(opts.Registry, codec.Options{ReadOnly: opts.RegistryReadOnly}), nil
}

// registerTypes registers every Avro type of the plan's flows under its
// subject before any consumer starts (or, read-only, looks each one up),
// so that a missing or incompatible schema stops the start, and no output
// waits on the registry for its id.
func (r *Runtime) registerTypes(ctx context.Context) error {
	if r.codec == nil {
		return nil
	}
	flows := planFlows(r.plan)
	if err := r.codec.Register(ctx, flows); err != nil {
		return fmt.Errorf("the flows' Avro types: %w", err)
	}
	r.log.Info("Avro types registered", "types", len(avroTypes(flows)), "read_only", r.opts.RegistryReadOnly)
	return nil
}

// FirstInputType returns the input type of target t's entry in pl when it
// is an Avro type (what `send` encodes the first message with), else nil.
func FirstInputType(pl *plan.Plan, t decide.Target) *spec.Type {
	switch {
	case t.Pipeline != "":
		if p := pl.Pipeline(t.Pipeline); p != nil {
			return avroTypeOf(p.File, p.Input)
		}
	case t.Itinerary != "":
		if it := pl.Itinerary(t.Itinerary); it != nil {
			return avroTypeOf(it.File, it.Input)
		}
	case t.Saga != "":
		if s := pl.Saga(t.Saga); s != nil {
			return avroTypeOf(s.File, s.Input)
		}
	}
	return nil
}

// EncodeFirst returns m, the first message of a run to t built from the
// runtime's plan (decide.FirstMessage), as it is sent: encoded by the
// entry's input type with its registry id when that type is Avro,
// unchanged otherwise. The admin API's /v1/messages/first calls it, so
// that `send` without flow files sends what the runtime reads.
func (r *Runtime) EncodeFirst(ctx context.Context, t decide.Target, m decide.Message) (decide.Message, error) {
	typ := FirstInputType(r.plan, t)
	if typ == nil || r.codec == nil {
		return m, nil
	}
	return EncodeMessage(ctx, r.codec, typ, m)
}

// encodeOwn returns m, a message the runtime publishes of its own accord
// (PublishAt and PublishIn, a schedule's firing), as it goes on the wire:
// its JSON body encoded by the Avro type it is for, with that type's
// registry id (FLOW-FORMAT §6), as send encodes a first message; unchanged
// when that type is not Avro, or the body is Avro already. The type it is
// for is the input type of the consumer its destination reaches, else the
// Avro type m.Type names. A body that does not fit the type is refused,
// naming it; so is one the registry could not give an id for.
func (r *Runtime) encodeOwn(ctx context.Context, m decide.Message) (decide.Message, error) {
	if r.codec == nil || codec.IsAvro(m.ContentType, m.Body) {
		return m, nil
	}
	typ := r.ownType(m)
	if typ == nil {
		return m, nil
	}
	out, err := EncodeMessage(ctx, r.codec, typ, m)
	switch {
	case err == nil:
		return out, nil
	case codec.Fatal(err):
		return m, fmt.Errorf("message %s for exchange %q, routing key %q: its body does not fit Avro type %s (%s): %w", m.MessageID, m.Exchange, m.RoutingKey, typ.Name, typ.Pos, err)
	}
	return m, fmt.Errorf("message %s for exchange %q, routing key %q: encode it as Avro type %s: the schema registry: %w", m.MessageID, m.Exchange, m.RoutingKey, typ.Name, err)
}

// ownType returns the Avro type a message the runtime publishes is for
// (encodeOwn), or nil.
func (r *Runtime) ownType(m decide.Message) *spec.Type {
	queue := destinationQueue(r.plan, m)
	for i := range r.plan.Consumers {
		if c := &r.plan.Consumers[i]; queue != "" && c.Queue == queue {
			if t := avroTypeOf(c.File, c.Input); t != nil {
				return t
			}
			break
		}
	}
	for _, f := range planFlows(r.plan) {
		if t := avroTypeOf(f, m.Type); t != nil {
			return t
		}
	}
	return nil
}

// EncodeMessage returns m with its JSON body encoded as Avro type typ by
// c: the Confluent framing, content_type application/vnd.apache.avro+binary
// and header x-acemq-schema-id (FLOW-FORMAT §6).
func EncodeMessage(ctx context.Context, c *codec.Codec, typ *spec.Type, m decide.Message) (decide.Message, error) {
	bin, id, err := c.Encode(ctx, typ, m.Body)
	if err != nil {
		return m, err
	}
	h := make(decide.Table, len(m.Headers)+1)
	maps.Copy(h, m.Headers)
	h[codec.HeaderSchemaID] = codec.HeaderValue(id)
	m.Body, m.ContentType, m.Headers = bin, codec.ContentType, h
	return m, nil
}
