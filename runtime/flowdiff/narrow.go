package flowdiff

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/schemacompat"
)

// problem is the first place a reader schema refuses what a writer schema
// accepted.
type problem struct {
	path, reason string
}

// narrowing reports the first reason a reader with schema reader (the new
// type) could refuse a message written under schema writer (the old one),
// or nil when it accepts every one: the schema registry's BACKWARD check
// of JSON Schema (stores/schemacompat), conservative where it does not
// understand a keyword. Both are decoded JSON with their $refs inlined. A
// schema that cannot be checked is taken as narrowed, naming why.
func narrowing(reader, writer any) *problem {
	r, err := parseSchema(reader)
	if err != nil {
		return &problem{"$", fmt.Sprintf("the new type cannot be checked against the old one (%v)", err)}
	}
	w, err := parseSchema(writer)
	if err != nil {
		return &problem{"$", fmt.Sprintf("the old type cannot be checked against the new one (%v)", err)}
	}
	p := schemacompat.Compare(r, w)
	if p == nil {
		return nil
	}
	// The registry's advice on registering under another level is not the
	// change check's.
	reason, _, cut := strings.Cut(p.Reason, "; this registry's")
	if cut {
		reason += ", and a change it cannot compare is taken as narrowing"
	}
	return &problem{p.Path, reason}
}

func parseSchema(doc any) (*schemacompat.Parsed, error) {
	text, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return schemacompat.Parse(stores.SchemaJSON, string(text))
}

// avroNarrowing reports the first reason a reader of type reader (the new)
// cannot read what a writer of type writer (the old) wrote, when either is
// an Avro type: both Avro, by Avro schema resolution (the registry's
// BACKWARD rule); one of each, always, since a message in flight was
// written in the other codec and there is no rule between the two.
func avroNarrowing(reader, writer *spec.Type) *problem {
	switch {
	case reader.IsAvro() && writer.IsAvro():
		r, err := schemacompat.Parse(stores.SchemaAvro, reader.Avro.Text)
		if err != nil {
			return &problem{"$", fmt.Sprintf("the new type cannot be checked against the old one (%v)", err)}
		}
		w, err := schemacompat.Parse(stores.SchemaAvro, writer.Avro.Text)
		if err != nil {
			return &problem{"$", fmt.Sprintf("the old type cannot be checked against the new one (%v)", err)}
		}
		if p := schemacompat.Compare(r, w); p != nil {
			reason, _, _ := strings.Cut(p.Reason, "; this registry's")
			return &problem{p.Path, reason}
		}
		return nil
	case reader.IsAvro():
		return &problem{"$", "the type changed from JSON Schema to Avro, and messages in flight were written as JSON by the old type"}
	default:
		return &problem{"$", "the type changed from Avro to JSON Schema, and messages in flight were written in Avro by the old type"}
	}
}
