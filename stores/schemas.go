package stores

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// SchemaType is the language of a registered schema, named as the
// Confluent Schema Registry names it (its schemaType field).
type SchemaType string

// The schema types the registry takes. An empty type is Avro, as for
// Confluent's clients.
const (
	SchemaAvro SchemaType = "AVRO"
	SchemaJSON SchemaType = "JSON"
)

// OrAvro returns t, or SchemaAvro when t is empty.
func (t SchemaType) OrAvro() SchemaType {
	if t == "" {
		return SchemaAvro
	}
	return t
}

// Compatibility is a subject's compatibility level (FLOW-FORMAT §6): which
// earlier versions a new version is checked against, and in which
// direction. BACKWARD: a reader with the new schema reads what the latest
// version wrote. FORWARD: a reader with the latest version reads what the
// new schema writes. FULL: both. The _TRANSITIVE forms check every live
// version instead of the latest; NONE checks nothing.
type Compatibility string

// The compatibility levels; DefaultCompatibility applies to a subject with
// no level of its own when the registry has no default set.
const (
	CompatNone               Compatibility = "NONE"
	CompatBackward           Compatibility = "BACKWARD"
	CompatBackwardTransitive Compatibility = "BACKWARD_TRANSITIVE"
	CompatForward            Compatibility = "FORWARD"
	CompatForwardTransitive  Compatibility = "FORWARD_TRANSITIVE"
	CompatFull               Compatibility = "FULL"
	CompatFullTransitive     Compatibility = "FULL_TRANSITIVE"

	DefaultCompatibility = CompatBackward
)

// Compatibilities lists the levels, in the order help text names them.
var Compatibilities = []Compatibility{CompatNone, CompatBackward, CompatBackwardTransitive,
	CompatForward, CompatForwardTransitive, CompatFull, CompatFullTransitive}

// Valid reports whether c is one of the seven levels.
func (c Compatibility) Valid() bool {
	for _, l := range Compatibilities {
		if c == l {
			return true
		}
	}
	return false
}

// Backward reports whether c checks that the new schema reads the old
// versions' data.
func (c Compatibility) Backward() bool {
	return c == CompatBackward || c == CompatBackwardTransitive || c == CompatFull || c == CompatFullTransitive
}

// Forward reports whether c checks that the old versions read the new
// schema's data.
func (c Compatibility) Forward() bool {
	return c == CompatForward || c == CompatForwardTransitive || c == CompatFull || c == CompatFullTransitive
}

// Transitive reports whether c checks every live version, not the latest
// alone.
func (c Compatibility) Transitive() bool { return strings.HasSuffix(string(c), "_TRANSITIVE") }

// Schema is what a schema id names, for ever. Canonical is the form its
// identity is taken from: Avro's Parsing Canonical Form (as
// hamba/avro/v2's Schema.String gives it, logical types kept), or for
// JSON Schema canonical JSON (object keys sorted, no insignificant space).
// Text is what the registry serves for it: for Avro the schema as first
// registered, normalised to JSON with its defaults, docs and aliases kept
// (what a reader's schema resolution and a FORWARD check need, and what
// Parsing Canonical Form leaves out); for JSON Schema the canonical JSON.
// Two registrations whose canonical forms are equal share the id and the
// first one's Text.
type Schema struct {
	ID        int
	Type      SchemaType
	Text      string
	Canonical string
}

// SchemaVersion is one version of a subject: Version counts from 1 in the
// order they were registered and is never given again in the subject, not
// even after a soft delete. Deleted is set once the subject was
// soft-deleted (DeleteSubject); the version's id still resolves.
type SchemaVersion struct {
	Subject string
	Version int
	Schema
	RegisteredAt time.Time
	Deleted      bool
}

// LatestVersion is the version number SchemaVersion takes for a subject's
// latest live version ("latest" and -1 in the Confluent API).
const LatestVersion = -1

// ErrInvalidSchema is matched (errors.Is) by every *InvalidSchemaError.
var ErrInvalidSchema = errors.New("invalid schema")

// InvalidSchemaError refuses a schema that does not parse as its type, or
// a type the registry does not take (HTTP 422, error code 42201).
type InvalidSchemaError struct {
	Subject string
	Type    SchemaType
	Err     error
}

// Error says which subject and type, and why.
func (e *InvalidSchemaError) Error() string {
	where := ""
	if e.Subject != "" {
		where = fmt.Sprintf("subject %q: ", e.Subject)
	}
	return fmt.Sprintf("%sinvalid %s schema: %v", where, e.Type, e.Err)
}

// Unwrap returns the parser's error.
func (e *InvalidSchemaError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidSchema.
func (e *InvalidSchemaError) Is(target error) bool { return target == ErrInvalidSchema }

// ErrIncompatibleSchema is matched (errors.Is) by every
// *IncompatibleSchemaError.
var ErrIncompatibleSchema = errors.New("incompatible schema")

// IncompatibleSchemaError refuses a schema that breaks its subject's
// compatibility level (HTTP 409): against Version, Path is the first
// incompatible field (for Avro the record's full name and the fields to
// it, "shop.Order.lines[].sku"; for JSON Schema "$" and the properties to
// it, "$.lines[].sku"; [] an array's items, {} a map's values) and Reason
// says what is wrong there. Direction is "backward" when the new schema
// cannot read what Version wrote, "forward" when Version cannot read what
// the new schema writes.
type IncompatibleSchemaError struct {
	Subject   string
	Level     Compatibility
	Version   int
	Direction string
	Path      string
	Reason    string
}

// Error names the subject, the version, the field and why.
func (e *IncompatibleSchemaError) Error() string {
	var who string
	switch e.Direction {
	case "forward":
		who = fmt.Sprintf("version %d cannot read what the new schema writes", e.Version)
	default:
		who = fmt.Sprintf("the new schema cannot read what version %d wrote", e.Version)
	}
	subject := ""
	if e.Subject != "" {
		subject = fmt.Sprintf("subject %q: ", e.Subject)
	}
	return fmt.Sprintf("%sschema incompatible under %s: %s: at %s: %s; make the change compatible, or set the subject's compatibility level",
		subject, e.Level, who, e.Path, e.Reason)
}

// Is reports whether target is ErrIncompatibleSchema.
func (e *IncompatibleSchemaError) Is(target error) bool { return target == ErrIncompatibleSchema }

// CheckSubject refuses a subject name a registry must not store: empty,
// longer than 255 bytes, or holding a control character or a slash (it is
// a path segment of the REST API).
func CheckSubject(subject string) error {
	switch {
	case subject == "":
		return errors.New("schema subject is empty: name the subject (by default <flow>.<type>)")
	case len(subject) > 255:
		return fmt.Errorf("schema subject %.40q… is %d bytes long, over 255: choose a shorter subject", subject, len(subject))
	case strings.ContainsFunc(subject, func(r rune) bool { return unicode.IsControl(r) || r == '/' }):
		return fmt.Errorf("schema subject %q holds a control character or a slash: choose a subject without", subject)
	}
	return nil
}

// Schemas is the schema registry: which schema each id names, and the
// versions of each subject, with its compatibility level. Ids are the
// 4-byte ids of the Confluent wire framing (FLOW-FORMAT §6).
//
// Guarantees: a canonical schema has one id, whatever the subject and
// however many replicas register it at once; an id is never reused and
// never names another schema, across restarts; nothing is ever
// hard-deleted (Purge leaves the registry alone), so an id read from any
// message ever written still resolves. Ids may have gaps.
//
// Protocol: RegisterSchema for a new version (checked against the
// subject's level; a refused version wrote nothing); LookupSchema,
// SchemaByID, SchemaVersion, SubjectVersions and Subjects to read. Errors:
// *InvalidSchemaError and *IncompatibleSchemaError are answers about the
// schema; any other error is a failure of the store and decides nothing.
// Implementations are safe for concurrent use.
type Schemas interface {
	// RegisterSchema registers text (of type typ; empty is Avro) under
	// subject and returns its version. When the subject has a live version
	// with the same canonical schema, that version is returned and created
	// is false; otherwise the schema is checked against the subject's live
	// versions under its level, and a new version is written with the
	// schema's id (the one it already has in any subject, or a new one).
	RegisterSchema(ctx context.Context, subject string, typ SchemaType, text string) (v SchemaVersion, created bool, err error)

	// LookupSchema returns the live version of subject whose canonical
	// schema is text's, and ok false when there is none.
	LookupSchema(ctx context.Context, subject string, typ SchemaType, text string) (v SchemaVersion, ok bool, err error)

	// SchemaByID returns the schema id names, soft-deleted or not, and ok
	// false when no schema has that id.
	SchemaByID(ctx context.Context, id int) (s Schema, ok bool, err error)

	// SchemaVersion returns version (LatestVersion: the latest live one)
	// of subject, and ok false when the subject has no such live version.
	SchemaVersion(ctx context.Context, subject string, version int) (v SchemaVersion, ok bool, err error)

	// SubjectVersions returns the versions of subject, oldest first: the
	// live ones, and the soft-deleted ones too with deleted. None means the
	// subject does not exist (or, without deleted, was soft-deleted).
	SubjectVersions(ctx context.Context, subject string, deleted bool) ([]SchemaVersion, error)

	// Subjects returns the subjects with a live version, sorted; with
	// deleted, the soft-deleted subjects too.
	Subjects(ctx context.Context, deleted bool) ([]string, error)

	// DeleteSubject soft-deletes subject: its live versions are marked
	// deleted and their numbers returned (none: no such live subject).
	// Their ids still resolve; registering in the subject again starts
	// after its highest version.
	DeleteSubject(ctx context.Context, subject string) ([]int, error)

	// Compatibility returns subject's level: its own, or the registry's
	// default (subject ""), or DefaultCompatibility.
	Compatibility(ctx context.Context, subject string) (Compatibility, error)

	// SetCompatibility sets subject's level (subject "": the registry's
	// default for subjects with none of their own).
	SetCompatibility(ctx context.Context, subject string, level Compatibility) error
}
