package flowtest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/acemq/acemq-flow/schemas"
	"github.com/acemq/acemq-flow/spec"
)

// TestSchemaAcceptsTheTestFiles: the editors' schema takes every test file
// the harness runs, the examples' and its own, and refuses a misspelt key.
func TestSchemaAcceptsTheTestFiles(t *testing.T) {
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemas.FlowTestSchemaURL, bytes.NewReader(schemas.FlowTestSchema)); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(schemas.FlowTestSchemaURL)
	if err != nil {
		t.Fatalf("compile flowtest.schema.json: %v", err)
	}
	files, _ := filepath.Glob("../../examples/flows/*.flowtest.yaml")
	more, _ := filepath.Glob("testdata/*/*.flowtest.yaml")
	files = append(files, more...)
	if len(files) < 4 {
		t.Fatalf("found %d test files, want the examples' and the harness's", len(files))
	}
	for _, fp := range files {
		data, err := os.ReadFile(fp)
		if err != nil {
			t.Fatal(err)
		}
		root, ds := spec.ReadYAML(fp, data, yamlKind)
		if ds.HasErrors() {
			t.Fatal(ds)
		}
		if err := sch.Validate(root.JSON()); err != nil {
			t.Errorf("flowtest.schema.json refuses %s: %v", fp, err)
		}
	}
	bad, _ := spec.ReadYAML("bad", []byte("version: acemq.flowtest/v1\ncases: [{name: x, steps: [{run: until_idle}], expects: {}}]\n"), yamlKind)
	if err := sch.Validate(bad.JSON()); err == nil {
		t.Errorf("flowtest.schema.json accepts a case with the key expects, want it refused")
	}
}
