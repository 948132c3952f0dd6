package codec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/hamba/avro/v2"

	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
)

// Registry is the part of the schema registry the codec needs;
// stores.Schemas satisfies it. RegisterSchema is called only without
// Options.ReadOnly. Its errors other than *stores.InvalidSchemaError and
// *stores.IncompatibleSchemaError are failures of the store, which the
// codec passes on wrapped (a retry may succeed).
type Registry interface {
	RegisterSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error)
	LookupSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error)
	SchemaByID(ctx context.Context, id int) (stores.Schema, bool, error)
}

// Options configure a Codec.
type Options struct {
	// ReadOnly only looks the flows' schemas up, never registers them
	// (`run --registry-readonly`): a subject without the type's schema is
	// an error at Register.
	ReadOnly bool
	// MaxBytes bounds one string or bytes value, and what one array or map
	// may allocate, when decoding; 0 is DefaultMaxBytes.
	MaxBytes int
}

// DefaultMaxBytes is the largest string or bytes value a message may hold:
// RabbitMQ 3.10's default max_message_size (128 MiB), as a body cannot be
// larger.
const DefaultMaxBytes = 128 << 20

// Codec decodes and encodes Avro payloads, caching what it learns from
// the registry: an id's schema (ids never change, so for ever), a type's
// id, and the resolution of a writer's schema to a reader's. It is safe
// for concurrent use.
type Codec struct {
	reg  Registry
	opts Options
	api  avro.API

	mu       sync.RWMutex
	writers  map[int]writer               // id → the writer's schema
	ids      map[typeKey]int              // a type's subject and schema → its id
	resolved map[resolveKey]avro.Schema   // writer id and reader schema → resolved
	encoders map[avro.Schema]*fastEncoder // an output type's schema → its fast encoder (nil: none)

	// Reused across messages: an Avro writer that frames and encodes an
	// output in one buffer, a JSON encoder with its buffer for what a
	// handler reads, and the fast encoder's state with its buffer; each
	// message's result is one copy of exactly its size.
	avroWriters sync.Pool // *avro.Writer
	jsonWriters sync.Pool // *jsonWriter
	encStates   sync.Pool // *encState
}

// jsonWriter is a JSON encoder that writes to its own buffer.
type jsonWriter struct {
	out []byte // appendJSON's
	buf bytes.Buffer
	enc *json.Encoder
}

type typeKey struct{ subject, canonical string }

// writer is a writer's schema and its canonical form, computed once
// (hamba/avro builds it anew on every String call).
type writer struct {
	schema    avro.Schema
	canonical string
	fast      *fastDecoder // nil: the schema is read the general way only
}

func newWriter(s avro.Schema, canonical string) writer {
	return writer{s, canonical, compileFast(s, map[string]bool{})}
}

type resolveKey struct {
	id     int
	reader string // the reader's canonical form
}

// New returns a codec over reg. It does no I/O.
func New(reg Registry, opts Options) *Codec {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	c := &Codec{
		reg:      reg,
		opts:     opts,
		api:      avro.Config{MaxByteSliceSize: opts.MaxBytes, MaxSliceAllocSize: opts.MaxBytes}.Freeze(),
		writers:  map[int]writer{},
		ids:      map[typeKey]int{},
		resolved: map[resolveKey]avro.Schema{},
		encoders: map[avro.Schema]*fastEncoder{},
	}
	c.avroWriters.New = func() any { return avro.NewWriter(nil, 1024, avro.WithWriterConfig(c.api)) }
	c.jsonWriters.New = func() any {
		w := &jsonWriter{}
		w.enc = json.NewEncoder(&w.buf)
		w.enc.SetEscapeHTML(false)
		return w
	}
	c.encStates.New = func() any { return &encState{} }
	return c
}

// maxPooled is the largest buffer put back in a pool: one that held a
// claim-checked payload of megabytes is left to the collector, not kept.
const maxPooled = 1 << 20

// Missing is an Avro type whose schema a read-only registry does not have
// under its subject.
type Missing struct {
	Flow, Type, Subject string
	Pos                 spec.Pos
}

// MissingSchemasError is Register's answer, read-only, when a registry
// lacks types' schemas: every one of them.
type MissingSchemasError struct{ Missing []Missing }

// Error names each missing subject and type, and how to fix it.
func (e *MissingSchemasError) Error() string {
	parts := make([]string, len(e.Missing))
	for i, m := range e.Missing {
		parts[i] = fmt.Sprintf("subject %q has no version with the schema of type %s of flow %s (%s)", m.Subject, m.Type, m.Flow, m.Pos)
	}
	return fmt.Sprintf("the schema registry is read-only and lacks %d schema(s): %s; register them (acemq-flow schemas register SUBJECT FILE) or run without --registry-readonly",
		len(e.Missing), strings.Join(parts, "; "))
}

// Register makes the codec ready for the flows' Avro types: each type's
// schema is registered under its subject (or, ReadOnly, looked up), and
// its id cached. A JSON Schema type is skipped. It returns every failure
// at once: a *MissingSchemasError (read-only), or the registry's refusal
// of a schema (an incompatible change, *stores.IncompatibleSchemaError)
// naming the type.
func (c *Codec) Register(ctx context.Context, flows []*spec.Flow) error {
	var missing []Missing
	var errs []error
	for _, f := range flows {
		for _, t := range f.Types {
			if !t.IsAvro() {
				continue
			}
			_, err := c.typeID(ctx, t)
			var nf *notFound
			switch {
			case errors.As(err, &nf):
				missing = append(missing, Missing{Flow: f.Name, Type: t.Name, Subject: t.Subject, Pos: t.Pos})
			case err != nil:
				errs = append(errs, fmt.Errorf("type %s of flow %s (%s): %w", t.Name, f.Name, t.Pos, err))
			}
		}
	}
	if len(missing) > 0 {
		errs = append(errs, &MissingSchemasError{Missing: missing})
	}
	return errors.Join(errs...)
}

type notFound struct{ subject string }

func (e *notFound) Error() string {
	return fmt.Sprintf("subject %q has no version with this schema", e.subject)
}

// typeID returns the registry id of t's schema under its subject,
// registering it first unless ReadOnly.
func (c *Codec) typeID(ctx context.Context, t *spec.Type) (int, error) {
	k := typeKey{t.Subject, t.Avro.Canonical}
	c.mu.RLock()
	id, ok := c.ids[k]
	c.mu.RUnlock()
	if ok {
		return id, nil
	}
	var v stores.SchemaVersion
	if c.opts.ReadOnly {
		var found bool
		var err error
		v, found, err = c.reg.LookupSchema(ctx, t.Subject, stores.SchemaAvro, t.Avro.Text)
		if err != nil {
			return 0, fmt.Errorf("look up subject %q: %w", t.Subject, err)
		}
		if !found {
			return 0, &notFound{subject: t.Subject}
		}
	} else {
		var err error
		v, _, err = c.reg.RegisterSchema(ctx, t.Subject, stores.SchemaAvro, t.Avro.Text)
		if err != nil {
			return 0, fmt.Errorf("register under subject %q: %w", t.Subject, err)
		}
	}
	c.mu.Lock()
	c.ids[k] = v.ID
	// The id names this very schema for ever: a message the runtime wrote
	// decodes without asking the registry.
	if _, ok := c.writers[v.ID]; !ok {
		c.writers[v.ID] = newWriter(t.Avro.Schema, t.Avro.Canonical)
	}
	c.mu.Unlock()
	return v.ID, nil
}

// ErrUnknownSchema is matched (errors.Is) by every *UnknownSchemaError.
var ErrUnknownSchema = errors.New("unknown schema id")

// UnknownSchemaError is a message whose schema id the registry does not
// know. It is fatal for that message: the engine dead-letters it with the
// id.
type UnknownSchemaError struct{ ID int }

// Error names the id.
func (e *UnknownSchemaError) Error() string {
	return fmt.Sprintf("schema id %d is not in the schema registry: the message was written with a schema registered elsewhere, or its prefix is damaged", e.ID)
}

// Is reports whether target is ErrUnknownSchema.
func (e *UnknownSchemaError) Is(target error) bool { return target == ErrUnknownSchema }

// DecodeError is a message that does not decode: its Avro binary does not
// read by the writer's schema, the writer's schema does not resolve to the
// reader's type, or the id names a schema that is not Avro. It is fatal
// for that message.
type DecodeError struct {
	ID   int    // the writer's schema id
	Type string // the reader's type, "" for any
	Err  error
}

// Error names the id, the type and why.
func (e *DecodeError) Error() string {
	as := ""
	if e.Type != "" {
		as = " as type " + e.Type
	}
	return fmt.Sprintf("decode the Avro message of schema id %d%s: %v", e.ID, as, e.Err)
}

// Unwrap returns the cause.
func (e *DecodeError) Unwrap() error { return e.Err }

// EncodeError is JSON that does not encode by its output type's schema: a
// handler's output that does not fit it. It is fatal for that message.
type EncodeError struct {
	Type, Subject string
	Err           error
}

// Error names the type, the subject and where the JSON does not fit.
func (e *EncodeError) Error() string {
	return fmt.Sprintf("encode the output as Avro type %s (subject %q): %v", e.Type, e.Subject, e.Err)
}

// Unwrap returns the cause.
func (e *EncodeError) Unwrap() error { return e.Err }

// Fatal reports whether err is about the message itself (not framed, an
// unknown id, not decodable, an output that does not fit), so that no
// retry can succeed: the engine dead-letters it with the reason. Any other
// error from the codec is the registry failing, worth a retry.
func Fatal(err error) bool {
	var fe *FrameError
	var ue *UnknownSchemaError
	var de *DecodeError
	var ee *EncodeError
	return errors.As(err, &fe) || errors.As(err, &ue) || errors.As(err, &de) || errors.As(err, &ee)
}

// writer returns the schema id names, from the cache or the registry.
func (c *Codec) writer(ctx context.Context, id int) (writer, error) {
	c.mu.RLock()
	w, ok := c.writers[id]
	c.mu.RUnlock()
	if ok {
		return w, nil
	}
	rs, found, err := c.reg.SchemaByID(ctx, id)
	if err != nil {
		return writer{}, fmt.Errorf("read schema id %d from the registry: %w", id, err)
	}
	if !found {
		return writer{}, &UnknownSchemaError{ID: id}
	}
	if rs.Type.OrAvro() != stores.SchemaAvro {
		return writer{}, &DecodeError{ID: id, Err: fmt.Errorf("schema id %d is a %s schema, not Avro", id, rs.Type)}
	}
	s, err := avro.ParseWithCache(rs.Text, "", &avro.SchemaCache{})
	if err != nil {
		return writer{}, &DecodeError{ID: id, Err: fmt.Errorf("the registry's schema does not parse: %w", err)}
	}
	w = newWriter(s, s.String())
	c.mu.Lock()
	c.writers[id] = w
	c.mu.Unlock()
	return w, nil
}

// readSchema is the schema the writer's data is read with: the writer's
// own when the reader is the same schema or any JSON, else the writer's
// resolved to the reader's (Avro schema resolution), cached.
func (c *Codec) readSchema(id int, w writer, reader *spec.Type) (avro.Schema, error) {
	if reader == nil || w.canonical == reader.Avro.Canonical {
		return w.schema, nil
	}
	k := resolveKey{id, reader.Avro.Canonical}
	c.mu.RLock()
	s, ok := c.resolved[k]
	c.mu.RUnlock()
	if ok {
		return s, nil
	}
	s, err := avro.NewSchemaCompatibility().Resolve(reader.Avro.Schema, w.schema)
	if err != nil {
		return nil, &DecodeError{ID: id, Type: reader.Name, Err: fmt.Errorf("the writer's schema does not resolve to the reader's: %w", err)}
	}
	c.mu.Lock()
	c.resolved[k] = s
	c.mu.Unlock()
	return s, nil
}

// Decode reads a Confluent-framed Avro body as JSON for a handler: by the
// writer's schema (found by the frame's id), resolved to reader's (an Avro
// type; nil reads by the writer's schema alone). It returns the JSON and
// the writer's id. Errors: *FrameError, *UnknownSchemaError and
// *DecodeError are fatal for the message (Fatal); any other is the
// registry failing.
func (c *Codec) Decode(ctx context.Context, reader *spec.Type, body []byte) ([]byte, int, error) {
	if reader != nil && !reader.IsAvro() {
		return nil, 0, fmt.Errorf("type %s is not an Avro type", reader.Name)
	}
	id, payload, err := ReadFrame(body)
	if err != nil {
		return nil, 0, err
	}
	w, err := c.writer(ctx, id)
	if err != nil {
		return nil, id, err
	}
	rs, err := c.readSchema(id, w, reader)
	if err != nil {
		return nil, id, err
	}
	if w.fast != nil && rs == w.schema {
		// Read by the writer's own schema: straight to JSON, when the
		// body reads so (else the general way, which gives the error).
		jw := c.jsonWriters.Get().(*jsonWriter)
		out, ok := w.fast.decode(jw.out[:0], payload, c.opts.MaxBytes)
		jw.out = out
		var res []byte
		if ok {
			res = bytes.Clone(out)
		}
		if cap(jw.out) <= maxPooled {
			c.jsonWriters.Put(jw)
		}
		if ok {
			return res, id, nil
		}
	}
	typeName := ""
	shape := w.schema
	if reader != nil {
		typeName, shape = reader.Name, reader.Avro.Schema
	}
	native, err := c.unmarshal(rs, payload)
	if err != nil {
		return nil, id, &DecodeError{ID: id, Type: typeName, Err: err}
	}
	v, err := spec.AvroToJSON(shape, native)
	if err != nil {
		return nil, id, &DecodeError{ID: id, Type: typeName, Err: err}
	}
	jw := c.jsonWriters.Get().(*jsonWriter)
	defer func() {
		if jw.buf.Cap() <= maxPooled && cap(jw.out) <= maxPooled {
			c.jsonWriters.Put(jw)
		}
	}()
	jw.buf.Reset()
	// Most trees are written without reflection; one with a string that
	// needs an escape (or a value appendJSON does not write) goes through
	// encoding/json, which writes the same bytes.
	out, ok := appendJSON(jw.out[:0], v)
	jw.out = out
	if ok {
		return bytes.Clone(out), id, nil
	}
	if err := jw.enc.Encode(v); err != nil {
		return nil, id, &DecodeError{ID: id, Type: typeName, Err: err}
	}
	return bytes.Clone(bytes.TrimSuffix(jw.buf.Bytes(), []byte("\n"))), id, nil
}

// Encode writes a handler's JSON output as the Confluent-framed Avro
// binary of its type t, with the id of t's schema under its subject
// (registered at Register, or now). It returns the body and the id; the
// message's content_type is ContentType and its HeaderSchemaID header
// HeaderValue(id). Errors: *EncodeError is fatal for the message (the
// output does not fit the type); any other is the registry failing (or
// refusing the schema, read-only).
func (c *Codec) Encode(ctx context.Context, t *spec.Type, jsonBody []byte) ([]byte, int, error) {
	if !t.IsAvro() {
		return nil, 0, fmt.Errorf("type %s is not an Avro type", t.Name)
	}
	if enc := c.encoder(t.Avro.Schema); enc != nil {
		// Straight from the JSON to Avro, when the JSON reads so (else the
		// general way, which gives the error). The id is asked for once
		// the JSON is known to fit, as on the general way.
		st := c.encStates.Get().(*encState)
		var frame [FrameSize]byte
		out, ok := enc.encode(st, append(st.out[:0], frame[:]...), jsonBody)
		st.out, st.In = out[:0], nil
		var id int
		var err error
		if ok {
			if id, err = c.typeID(ctx, t); err == nil {
				AppendFrame(out[:0], id, nil)
				out = bytes.Clone(out)
			}
		}
		if cap(st.out) <= maxPooled && cap(st.Key) <= maxPooled {
			c.encStates.Put(st)
		}
		switch {
		case ok && err != nil:
			return nil, 0, err
		case ok:
			return out, id, nil
		}
	}
	return c.encodeGeneral(ctx, t, jsonBody)
}

// encoder returns the fast encoder of an output type's schema s, compiled
// once; nil when s has none.
func (c *Codec) encoder(s avro.Schema) *fastEncoder {
	c.mu.RLock()
	enc, ok := c.encoders[s]
	c.mu.RUnlock()
	if ok {
		return enc
	}
	enc = compileFastEncoder(s, map[string]bool{})
	c.mu.Lock()
	c.encoders[s] = enc
	c.mu.Unlock()
	return enc
}

// encodeGeneral is Encode by a tree: the JSON decoded (spec.DecodeJSON),
// converted (spec.AvroFromJSON) and written by hamba/avro.
func (c *Codec) encodeGeneral(ctx context.Context, t *spec.Type, jsonBody []byte) ([]byte, int, error) {
	v, err := spec.DecodeJSON(jsonBody)
	if err != nil {
		return nil, 0, &EncodeError{Type: t.Name, Subject: t.Subject, Err: fmt.Errorf("the output is not JSON: %w", err)}
	}
	native, err := spec.AvroFromJSON(t.Avro.Schema, v)
	if err != nil {
		return nil, 0, &EncodeError{Type: t.Name, Subject: t.Subject, Err: err}
	}
	id, err := c.typeID(ctx, t)
	if err != nil {
		return nil, 0, err
	}
	// The frame and the binary in one buffer, copied out once (Marshal
	// would copy the binary out, and the frame copy it again).
	w := c.avroWriters.Get().(*avro.Writer)
	defer func() {
		w.Reset(nil)
		w.Error = nil
		if cap(w.Buffer()) <= maxPooled {
			c.avroWriters.Put(w)
		}
	}()
	w.Reset(nil)
	var frame [FrameSize]byte
	_, _ = w.Write(AppendFrame(frame[:0], id, nil))
	w.WriteVal(t.Avro.Schema, native)
	if err := w.Error; err != nil {
		return nil, id, &EncodeError{Type: t.Name, Subject: t.Subject, Err: errors.New(strings.TrimPrefix(err.Error(), "avro: "))}
	}
	return bytes.Clone(w.Buffer()), id, nil
}

// unmarshal reads Avro binary by schema s into hamba/avro's generic
// values; a panic in the decoder on a body no writer meant is an error
// about that message, never a crash of the consumer.
func (c *Codec) unmarshal(s avro.Schema, payload []byte) (native any, err error) {
	defer func() {
		if r := recover(); r != nil {
			native, err = nil, fmt.Errorf("the Avro binary could not be read (%v)", r)
		}
	}()
	if err := c.api.Unmarshal(s, payload, &native); err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "avro: "))
	}
	return native, nil
}
