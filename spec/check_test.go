package spec

import (
	"encoding/json"
	"testing"
	"testing/fstest"
)

// TestTypeHintTellsARefCycleByItsErrorType compiles real schemas, so that it
// fails if the compiler stops reporting a cycle as an InfiniteLoopError, or
// if the hint goes back to reading the error's text.
func TestTypeHintTellsARefCycleByItsErrorType(t *testing.T) {
	const cycle, fix = "break the $ref cycle", "fix the schema (JSON Schema 2020-12)"
	fsys := fstest.MapFS{
		"flows/self.json": {Data: []byte(`{"allOf": [{"$ref": "self.json"}]}`)},
		"loops/flow.yaml": {Data: []byte("version: acemq.flow/v1\n")},
		"flows/flow.yaml": {Data: []byte("version: acemq.flow/v1\n")},
	}
	for _, tc := range []struct {
		name, file, typ, schema, want string
	}{
		{"a schema that refers back to itself through allOf is a cycle", "flows/flow.yaml", "Node", `{"allOf": [{"$ref": "#"}]}`, cycle},
		{"a definition that refers to itself is a cycle", "flows/flow.yaml", "Node", `{"$defs": {"n": {"$ref": "#/$defs/n"}}, "$ref": "#/$defs/n"}`, cycle},
		{"a $ref file that refers back to itself is a cycle", "flows/flow.yaml", "Node", `{"$ref": "self.json"}`, cycle},
		{"an invalid schema in a type named loop is not a cycle", "flows/flow.yaml", "loop", `{"type": 5}`, fix},
		{"an invalid schema in a folder named loops is not a cycle", "loops/flow.yaml", "Order", `{"type": "objekt"}`, fix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var doc any
			if err := json.Unmarshal([]byte(tc.schema), &doc); err != nil {
				t.Fatal(err)
			}
			_, err := newTypeCompiler(fsys, tc.file).compile(tc.typ, []byte(tc.schema), doc)
			if err == nil {
				t.Fatalf("compile(%s in %s) = nil error, want one", tc.schema, tc.file)
			}
			if got := typeHint(err); got != tc.want {
				t.Errorf("typeHint(%v) = %q, want %q", err, got, tc.want)
			}
		})
	}
}
