package backend

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/schemacompat"
)

// SchemaTx is what one registration reads and writes, inside a backend's
// transaction that holds its subject's lock (so that two registrations in
// one subject never pick the same version).
type SchemaTx interface {
	// LiveVersions returns subject's live versions, oldest first.
	LiveVersions(ctx context.Context, subject string) ([]stores.SchemaVersion, error)
	// Level returns subject's effective compatibility level.
	Level(ctx context.Context, subject string) (stores.Compatibility, error)
	// SchemaID returns the id of the schema with fingerprint, ok false
	// when there is none.
	SchemaID(ctx context.Context, fingerprint string) (id int, ok bool, err error)
	// InsertSchema gives p a new id, or returns the id a concurrent
	// registration gave the same fingerprint first.
	InsertSchema(ctx context.Context, p *schemacompat.Parsed, now time.Time) (int, error)
	// MaxVersion returns subject's highest version, deleted or not, 0 for
	// none.
	MaxVersion(ctx context.Context, subject string) (int, error)
	// InsertVersion writes a live version.
	InsertVersion(ctx context.Context, subject string, version, id int, now time.Time) error
}

// PrepareSchema checks subject and parses text, for RegisterSchema and
// LookupSchema before any transaction.
func PrepareSchema(subject string, typ stores.SchemaType, text string) (*schemacompat.Parsed, error) {
	if err := stores.CheckSubject(subject); err != nil {
		return nil, err
	}
	p, err := schemacompat.Parse(typ, text)
	if err != nil {
		if ie, ok := err.(*stores.InvalidSchemaError); ok {
			ie.Subject = subject
		}
		return nil, err
	}
	return p, nil
}

// RegisterSchema is stores.Schemas.RegisterSchema over tx for a schema
// PrepareSchema parsed.
func RegisterSchema(ctx context.Context, tx SchemaTx, subject string, p *schemacompat.Parsed, now time.Time) (stores.SchemaVersion, bool, error) {
	live, err := tx.LiveVersions(ctx, subject)
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	if v, ok := FindCanonical(live, p); ok {
		return v, false, nil
	}
	level, err := tx.Level(ctx, subject)
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	if err := schemacompat.Check(level, p, live); err != nil {
		if ie, ok := err.(*stores.IncompatibleSchemaError); ok {
			ie.Subject = subject
		}
		return stores.SchemaVersion{}, false, err
	}
	id, ok, err := tx.SchemaID(ctx, p.Fingerprint())
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	if !ok {
		if id, err = tx.InsertSchema(ctx, p, now); err != nil {
			return stores.SchemaVersion{}, false, err
		}
	}
	if id <= 0 || id > math.MaxInt32 {
		return stores.SchemaVersion{}, false, fmt.Errorf("subject %q: schema id %d is outside the 4 bytes of the wire framing (1 to %d)", subject, id, math.MaxInt32)
	}
	top, err := tx.MaxVersion(ctx, subject)
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	if err := tx.InsertVersion(ctx, subject, top+1, id, now); err != nil {
		return stores.SchemaVersion{}, false, err
	}
	return stores.SchemaVersion{
		Subject: subject, Version: top + 1, RegisteredAt: now,
		Schema: stores.Schema{ID: id, Type: p.Type, Text: p.Text, Canonical: p.Canonical},
	}, true, nil
}

// FindCanonical returns the version in vs whose schema is p's.
func FindCanonical(vs []stores.SchemaVersion, p *schemacompat.Parsed) (stores.SchemaVersion, bool) {
	for _, v := range vs {
		if v.Type == p.Type && v.Canonical == p.Canonical {
			return v, true
		}
	}
	return stores.SchemaVersion{}, false
}

// CheckLevel refuses a level that is not one of the seven.
func CheckLevel(subject string, level stores.Compatibility) error {
	if !level.Valid() {
		return fmt.Errorf("subject %q: compatibility level %q is not one of NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE", subject, level)
	}
	return nil
}

// EffectiveLevel picks the subject's own level, the registry's default,
// or stores.DefaultCompatibility.
func EffectiveLevel(own, registry string) stores.Compatibility {
	switch {
	case own != "":
		return stores.Compatibility(own)
	case registry != "":
		return stores.Compatibility(registry)
	}
	return stores.DefaultCompatibility
}
