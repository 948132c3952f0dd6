package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/test/testenv"
)

func TestValidatePluginsNamesAMissingHandlerAtItsPosition(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a plugin")
	}
	dir := t.TempDir()
	testenv.GoBuild(t, dir, "./examples/plugins/testkit")
	flow := filepath.Join(dir, "flow.yaml")
	if err := os.WriteFile(flow, []byte(`version: acemq.flow/v1
name: check
plugins:
  testkit: {command: ./testkit}
pipelines:
  - name: p
    steps:
      - {name: a, handler: testkit.echo}
      - {name: b, handler: testkit.ecko}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code := cli(t, "validate", flow)
	if code != 0 {
		t.Fatalf("validate without --plugins: exit %d, want 0 (it must not need the binary):\n%s", code, out)
	}
	out, errOut, code := cli(t, "validate", "--plugins", flow)
	if code != 1 {
		t.Fatalf("validate --plugins: exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "flow.yaml:9:10: error: consumer \"p.b\" uses handler \"testkit.ecko\", but plugin \"testkit\" serves no handler \"ecko\"") {
		t.Errorf("validate --plugins output does not name the handler at its position:\n%s", out)
	}
	if strings.Contains(out, "testkit.echo") {
		t.Errorf("the handler that exists was reported:\n%s", out)
	}
}

func TestValidatePluginsChecksDeclaredTypesAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a plugin")
	}
	dir := t.TempDir()
	testenv.GoBuild(t, dir, "./examples/plugins/orders")
	flow := filepath.Join(dir, "flow.yaml")
	if err := os.WriteFile(flow, []byte(`version: acemq.flow/v1
name: check
plugins:
  orders: {command: ./orders}
types:
  Order: {type: object}
  Invoice: {type: object}
pipelines:
  - name: p
    input: Invoice
    steps:
      - {name: a, handler: orders.validate, output: Order}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cli(t, "validate", "--plugins", flow)
	if code != 1 || !strings.Contains(out, `takes Invoice, but handler "orders.validate" declares input Order`) {
		t.Errorf("validate --plugins: exit %d, want 1 with the input types named\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(out, "outputs Order") {
		t.Errorf("the output types agree but were reported:\n%s", out)
	}
}
