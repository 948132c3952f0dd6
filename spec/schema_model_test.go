package spec

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/schemas"
)

// TestSchemaAndModelDescribeTheSameFormat walks the JSON Schema's
// properties and the model's yaml tags side by side and fails when one has
// a key the other lacks.
func TestSchemaAndModelDescribeTheSameFormat(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(schemas.FlowSchema, &doc); err != nil {
		t.Fatal(err)
	}
	defs, _ := doc["$defs"].(map[string]any)
	resolve := func(v any) map[string]any {
		for range 10 {
			m, _ := v.(map[string]any)
			ref, ok := m["$ref"].(string)
			if !ok {
				return m
			}
			v = defs[strings.TrimPrefix(ref, "#/$defs/")]
		}
		return nil
	}
	props := func(v any) []string {
		m := resolve(v)
		p, _ := m["properties"].(map[string]any)
		var keys []string
		for k := range p {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return keys
	}
	item := func(v any, key string) any {
		m := resolve(v)
		p, _ := m["properties"].(map[string]any)
		return p[key]
	}
	elem := func(v any) any {
		m := resolve(v)
		if it, ok := m["items"]; ok {
			return it
		}
		return m["additionalProperties"]
	}
	cases := []struct {
		name   string
		schema any
		model  reflect.Type
		skip   []string // model keys that are not file keys at this place
	}{
		{"flow", doc, reflect.TypeFor[Flow](), nil},
		{"defaults", item(doc, "defaults"), reflect.TypeFor[Defaults](), nil},
		{"retry", item(item(doc, "defaults"), "retry"), reflect.TypeFor[Retry](), nil},
		{"claim check", item(item(doc, "defaults"), "claim_check"), reflect.TypeFor[ClaimCheck](), nil},
		{"plugin", elem(item(doc, "plugins")), reflect.TypeFor[Plugin](), nil},
		{"type", elem(item(doc, "types")), reflect.TypeFor[Type](), nil},
		{"pipeline", elem(item(doc, "pipelines")), reflect.TypeFor[Pipeline](), nil},
		{"step", elem(item(elem(item(doc, "pipelines")), "steps")), reflect.TypeFor[Step](), nil},
		{"itinerary", elem(item(doc, "itineraries")), reflect.TypeFor[Itinerary](), nil},
		{"stop", elem(item(elem(item(doc, "itineraries")), "stops")), reflect.TypeFor[Stop](), nil},
		{"consumer", elem(item(doc, "consumers")), reflect.TypeFor[Consumer](), nil},
		{"binding", elem(item(elem(item(doc, "consumers")), "bind")), reflect.TypeFor[Binding](), nil},
		// declare is the consumer's queue: its name is the consumer's `queue`.
		{"declare", item(elem(item(doc, "consumers")), "declare"), reflect.TypeFor[Queue](), []string{"name"}},
		{"saga", elem(item(doc, "sagas")), reflect.TypeFor[Saga](), nil},
		{"saga step", elem(item(elem(item(doc, "sagas")), "steps")), reflect.TypeFor[SagaStep](), nil},
		{"schedule", elem(item(doc, "schedules")), reflect.TypeFor[Schedule](), nil},
		{"send", item(elem(item(doc, "schedules")), "send"), reflect.TypeFor[Send](), nil},
		{"topology", item(doc, "topology"), reflect.TypeFor[Topology](), nil},
		{"exchange", elem(item(item(doc, "topology"), "exchanges")), reflect.TypeFor[Exchange](), nil},
		{"queue", elem(item(item(doc, "topology"), "queues")), reflect.TypeFor[Queue](), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var model []string
			for f := range tc.model.Fields() {
				tag := f.Tag.Get("yaml")
				if tag == "" || tag == "-" || slices.Contains(tc.skip, tag) {
					continue
				}
				model = append(model, tag)
			}
			sort.Strings(model)
			schema := props(tc.schema)
			if len(schema) == 0 {
				t.Fatalf("no properties found in the schema for %s", tc.name)
			}
			for _, k := range schema {
				if !slices.Contains(model, k) {
					t.Errorf("%s: the schema has key %q that the model (%s) lacks", tc.name, k, tc.model)
				}
			}
			for _, k := range model {
				if !slices.Contains(schema, k) {
					t.Errorf("%s: the model (%s) has key %q that the schema lacks", tc.name, tc.model, k)
				}
			}
		})
	}
}
