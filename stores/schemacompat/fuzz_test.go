package schemacompat_test

import (
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/schemacompat"
)

// FuzzParseCompare: whatever a client sends to register, parsing and
// comparing it with itself and with another schema answers, never panics,
// and a schema always reads itself.
func FuzzParseCompare(f *testing.F) {
	for _, s := range []string{
		`"string"`, `["null","int"]`,
		`{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":1}]}`,
		`{"type":"record","name":"N","fields":[{"name":"next","type":["null","N"]}]}`,
		`{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}`,
		`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
		`{"type":"array","items":{"enum":[1,2]}}`, `true`, `{"oneOf":[{"type":"null"}]}`,
	} {
		f.Add(s, `{"type":"record","name":"R","fields":[]}`)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, typ := range []stores.SchemaType{stores.SchemaAvro, stores.SchemaJSON} {
			pa, err := schemacompat.Parse(typ, a)
			if err != nil {
				continue
			}
			if p := schemacompat.Compare(pa, pa); p != nil {
				t.Fatalf("%s schema %s does not read itself: %s: %s", typ, a, p.Path, p.Reason)
			}
			again, err := schemacompat.Parse(typ, pa.Text)
			if err != nil || again.Canonical != pa.Canonical {
				t.Fatalf("%s schema %s: its served text %s parses to %v (%v), want canonical %s", typ, a, pa.Text, again, err, pa.Canonical)
			}
			if pb, err := schemacompat.Parse(typ, b); err == nil {
				schemacompat.Compare(pa, pb)
				schemacompat.Compare(pb, pa)
			}
		}
	})
}
