// Package schemacompat is the schema registry's pure part: it parses a
// schema into its canonical form (the form its id is taken from) and
// checks a new version against a subject's earlier ones under a
// compatibility level, naming the first incompatible field. Avro is
// checked with hamba/avro/v2's SchemaCompatibility; JSON Schema with the
// rule set of jsonschema.go. It does no I/O and imports nothing of the
// project but stores, so the store backends, the admin API and the CLI
// share it.
package schemacompat

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/hamba/avro/v2"

	"github.com/acemq/acemq-flow/stores"
)

// Parsed is one schema, parsed and in its canonical form.
type Parsed struct {
	Type stores.SchemaType
	// Canonical is the identity of the schema (stores.Schema.Canonical).
	Canonical string
	// Text is what a registry stores and serves for it (stores.Schema.Text).
	Text string

	avro avro.Schema
	json any
}

// Fingerprint is the key a store finds a schema's id by: the SHA-256 of
// its type and canonical form, in hex.
func (p *Parsed) Fingerprint() string { return Fingerprint(p.Type, p.Canonical) }

// Fingerprint returns the SHA-256, in hex, of typ and canonical.
func Fingerprint(typ stores.SchemaType, canonical string) string {
	sum := sha256.Sum256([]byte(string(typ.OrAvro()) + "\n" + canonical))
	return hex.EncodeToString(sum[:])
}

// Parse parses text as a schema of type typ (empty: Avro). An Avro schema
// is parsed on its own, never resolving a named type through another
// schema parsed before. The error is a *stores.InvalidSchemaError.
func Parse(typ stores.SchemaType, text string) (*Parsed, error) {
	typ = typ.OrAvro()
	invalid := func(err error) error { return &stores.InvalidSchemaError{Type: typ, Err: err} }
	switch typ {
	case stores.SchemaAvro:
		s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
		if err != nil {
			return nil, invalid(err)
		}
		full, err := json.Marshal(s)
		if err != nil {
			return nil, invalid(err)
		}
		return &Parsed{Type: typ, Canonical: s.String(), Text: string(full), avro: s}, nil
	case stores.SchemaJSON:
		v, canonical, err := canonicalJSON([]byte(text))
		if err != nil {
			return nil, invalid(err)
		}
		if err := checkJSONSchema(v, canonical); err != nil {
			return nil, invalid(err)
		}
		return &Parsed{Type: typ, Canonical: canonical, Text: canonical, json: v}, nil
	default:
		return nil, invalid(fmt.Errorf("schema type %q is not supported: use AVRO or JSON", typ))
	}
}

// canonicalJSON decodes text (one JSON value, numbers kept as written) and
// encodes it with sorted keys, no insignificant space and no HTML escaping.
func canonicalJSON(text []byte) (any, string, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, "", fmt.Errorf("not JSON: %w", err)
	}
	if dec.More() {
		return nil, "", fmt.Errorf("more than one JSON value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, "", err
	}
	return v, string(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// Problem is the first incompatibility found between a reader and a
// writer schema: where, and why.
type Problem struct {
	Path   string
	Reason string
}

// Check checks candidate against a subject's live versions (oldest
// first) under level: the latest alone, or every one for a _TRANSITIVE
// level, latest first; in the backward direction (candidate reads the
// version's data) first, then forward. A version of another schema type is
// incompatible unless the level is NONE. It returns nil or a
// *stores.IncompatibleSchemaError without its Subject.
func Check(level stores.Compatibility, candidate *Parsed, versions []stores.SchemaVersion) error {
	if level == stores.CompatNone || len(versions) == 0 {
		return nil
	}
	against := versions[len(versions)-1:]
	if level.Transitive() {
		against = versions
	}
	for i := len(against) - 1; i >= 0; i-- {
		v := against[i]
		old, err := Parse(v.Type, v.Text)
		if err != nil {
			return fmt.Errorf("version %d (id %d) as stored: %w", v.Version, v.ID, err)
		}
		fail := func(direction string, p *Problem) error {
			return &stores.IncompatibleSchemaError{Level: level, Version: v.Version, Direction: direction, Path: p.Path, Reason: p.Reason}
		}
		if level.Backward() {
			if p := Compare(candidate, old); p != nil {
				return fail("backward", p)
			}
		}
		if level.Forward() {
			if p := Compare(old, candidate); p != nil {
				return fail("forward", p)
			}
		}
	}
	return nil
}

// Compare reports the first reason a reader with schema reader could not
// read every value written with schema writer, or nil when it can.
func Compare(reader, writer *Parsed) *Problem {
	if reader.Type != writer.Type {
		return &Problem{Path: "(schema)", Reason: fmt.Sprintf("the schema type changed from %s to %s", writer.Type, reader.Type)}
	}
	if reader.Type == stores.SchemaAvro {
		return compareAvro(reader.avro, writer.avro)
	}
	return compareJSON(reader.json, writer.json)
}
