package flowdiff

import (
	"encoding/json"
	"fmt"
	"strings"

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
