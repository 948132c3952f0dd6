package flowdiff

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestNarrowing runs the BACKWARD check of stores/schemacompat through
// narrowing, on the changes flows make to their types.
func TestNarrowing(t *testing.T) {
	cases := []struct {
		name        string
		old, new    string
		wantAt      string // "" when the new type accepts everything the old did
		wantContain string
	}{
		{"the same schema", `{"type": "object"}`, `{"type": "object"}`, "", ""},
		{"a new optional property on an open object is refused, as the old writer may have put anything there",
			`{"type": "object"}`, `{"type": "object", "properties": {"n": {"type": "integer"}}}`, "$.n", "the property is new"},
		{"a new optional property on a closed object is accepted",
			`{"type": "object", "additionalProperties": false}`, `{"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": false}`, "", ""},
		{"a property required", `{"properties": {"a": {}}}`, `{"properties": {"a": {}}, "required": ["a"]}`, "$.a", "now required"},
		{"a requirement dropped", `{"required": ["a"]}`, `{}`, "", ""},
		{"integer widened to number", `{"type": "integer"}`, `{"type": "number"}`, "", ""},
		{"number narrowed to integer", `{"type": "number"}`, `{"type": "integer"}`, "$", "the writer may write number"},
		{"a type added to a list", `{"type": "string"}`, `{"type": ["string", "null"]}`, "", ""},
		{"an enum value removed", `{"enum": ["a", "b"]}`, `{"enum": ["a"]}`, "$", `value "b" was removed`},
		{"an enum value added", `{"enum": ["a"]}`, `{"enum": ["a", "b"]}`, "", ""},
		{"a const where any value was allowed", `{}`, `{"const": 1}`, "$", "limited to [1]"},
		{"a maximum lowered", `{"maximum": 10}`, `{"maximum": 5}`, "$", "maximum fell from 10 to 5"},
		{"a maximum raised", `{"maximum": 5}`, `{"maximum": 10}`, "", ""},
		{"a minLength added", `{"type": "string"}`, `{"type": "string", "minLength": 1}`, "$", "minLength 1 is new"},
		{"a pattern added", `{"type": "string"}`, `{"type": "string", "pattern": "^a"}`, "$", "pattern"},
		{"a format kept", `{"type": "string", "format": "date-time"}`, `{"type": "string", "format": "date-time"}`, "", ""},
		{"items narrowed", `{"type": "array", "items": {"type": "number"}}`, `{"type": "array", "items": {"type": "integer"}}`, "$[]", "number"},
		{"additionalProperties closed", `{"properties": {"a": {}}}`, `{"properties": {"a": {}}, "additionalProperties": false}`, "$.*", "false"},
		{"a property the new type drops, on a closed object", `{"properties": {"a": {"type": "string"}}}`, `{"additionalProperties": false}`, "$.a", "false"},
		{"a nested property narrowed", `{"properties": {"a": {"properties": {"b": {"type": "number"}}}}}`, `{"properties": {"a": {"properties": {"b": {"type": "integer"}}}}}`, "$.a.b", "number"},
		{"a keyword not compared by meaning changed", `{"anyOf": [{"type": "string"}]}`, `{"anyOf": [{"type": "string"}, {"type": "null"}]}`, "$", "anyOf changed"},
		{"annotations alone", `{"type": "string", "description": "x"}`, `{"type": "string", "description": "y", "title": "T"}`, "", ""},
		{"anything to a constrained type", `true`, `{"type": "object"}`, "$", "allowed any type"},
		{"a constrained type to anything", `{"type": "object"}`, `true`, "", ""},
		{"false to anything", `false`, `{"type": "object"}`, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var old, new any
			if err := json.Unmarshal([]byte(tc.old), &old); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.new), &new); err != nil {
				t.Fatal(err)
			}
			p := narrowing(new, old)
			switch {
			case tc.wantAt == "" && p != nil:
				t.Errorf("narrowing(%s, %s) = %s: %s, want nil", tc.new, tc.old, p.path, p.reason)
			case tc.wantAt != "" && p == nil:
				t.Errorf("narrowing(%s, %s) = nil, want a problem at %s", tc.new, tc.old, tc.wantAt)
			case p != nil && (p.path != tc.wantAt || !strings.Contains(p.reason, tc.wantContain)):
				t.Errorf("narrowing(%s, %s) = %s: %s, want %s with %q", tc.new, tc.old, p.path, p.reason, tc.wantAt, tc.wantContain)
			}
		})
	}
}
