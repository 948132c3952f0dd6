package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
)

const schemaDir = "testdata/schemas/files/"

// writeSchemaFixture registers, through the CLI, shop.Order versions 1 and
// 2, shop.Invoice version 1 (level FULL), and the same invoice schema as
// billing.Invoice: ids 1, 2, 3 and 3 again.
func writeSchemaFixture(t *testing.T, set stores.Set, where ...string) {
	t.Helper()
	for _, r := range [][2]string{
		{"shop.Order", "order-v1.avsc"}, {"shop.Order", "order-v2.avsc"},
		{"shop.Invoice", "invoice-v1.json"}, {"billing.Invoice", "invoice-v1.json"},
	} {
		args := append([]string{"schemas", "register", r[0], schemaDir + r[1]}, where...)
		if out, errOut, code := cli(t, args...); code != 0 {
			t.Fatalf("acemq-flow %s: exit %d, %s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	if err := set.SetCompatibility(t.Context(), "shop.Invoice", stores.CompatFull); err != nil {
		t.Fatal(err)
	}
}

// schemaBackends are where the schemas commands are tested: a store URL on
// SQLite and PostgreSQL, and --registry at the admin listener's REST API
// over SQLite. Every one gives the same goldens.
var schemaBackends = []struct {
	name string
	open func(t *testing.T) (set stores.Set, where []string)
}{
	{"sqlite", func(t *testing.T) (stores.Set, []string) {
		st := storetest.OpenSQLite(t, stores.Options{})
		return st, []string{"--store", "sqlite:" + st.Path()}
	}},
	{"postgres", func(t *testing.T) (stores.Set, []string) {
		st, url := storetest.OpenPostgresSchema(t, stores.Options{})
		return st, []string{"--store", url}
	}},
	{"registry", func(t *testing.T) (stores.Set, []string) {
		st := storetest.OpenSQLite(t, stores.Options{})
		s, err := admin.New(admin.Options{Addr: "127.0.0.1:0", Token: "s3cret", Registry: st})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		return st, []string{"--registry", srv.URL + "/", "--admin-token", "s3cret"}
	}},
}

func TestSchemasGoldens(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"list.txt", []string{"list"}, 0},
		{"list.json", []string{"list", "--format", "json"}, 0},
		{"show-latest.txt", []string{"show", "shop.Order"}, 0},
		{"show-1.json", []string{"show", "shop.Order", "1", "--format", "json"}, 0},
		{"show-json-schema.txt", []string{"show", "billing.Invoice", "latest"}, 0},
		{"check.txt", []string{"check", "testdata/schemas/check"}, 1},
		{"check.json", []string{"check", "--format", "json", "testdata/schemas/check"}, 1},
		{"check-compatible.txt", []string{"check", "testdata/schemas/check/shop.Order.avsc", "testdata/schemas/check/audit.Event.avsc"}, 0},
		{"check-subject.txt", []string{"check", "--subject", "shop.Order", schemaDir + "order-bad.avsc"}, 1},
		{"check-flows.txt", []string{"check", "testdata/schemas/flows/shop.yaml", "testdata/schemas/flows/shop-next.yaml"}, 1},
		{"check-flows.json", []string{"check", "--format", "json", "testdata/schemas/flows/shop.yaml"}, 0},
	}
	for _, b := range schemaBackends {
		t.Run(b.name, func(t *testing.T) {
			set, where := b.open(t)
			writeSchemaFixture(t, set, where...)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					args := append(append([]string{"schemas"}, tc.args...), where...)
					out, errOut, code := cli(t, args...)
					if code != tc.code || errOut != "" {
						t.Fatalf("acemq-flow %s: exit %d, stderr %q; want exit %d and nothing on stderr", strings.Join(tc.args, " "), code, errOut, tc.code)
					}
					golden(t, filepath.Join("testdata/schemas", tc.name+".golden"), []byte(out))
				})
			}
		})
	}
}

func TestSchemasRegister(t *testing.T) {
	for _, b := range schemaBackends {
		t.Run(b.name, func(t *testing.T) {
			set, where := b.open(t)
			run := func(args ...string) (string, string, int) {
				return cli(t, append(append([]string{"schemas"}, args...), where...)...)
			}
			out, errOut, code := run("register", "shop.Order", schemaDir+"order-v1.avsc")
			if code != 0 || out != schemaDir+"order-v1.avsc: registered as shop.Order version 1, schema id 1\n" {
				t.Fatalf("register v1: exit %d, %q %q", code, out, errOut)
			}
			out, _, code = run("register", "shop.Order", schemaDir+"order-v1.avsc", "--format", "json")
			var got struct {
				Version, ID int
				Created     bool
			}
			if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.Created || got.ID != 1 || got.Version != 1 {
				t.Fatalf("register v1 again: exit %d, %s; want version 1 id 1 not created", code, out)
			}
			// The incompatible version is refused, naming the field, and
			// nothing is written.
			_, errOut, code = run("register", "shop.Order", schemaDir+"order-bad.avsc")
			if code != 1 || !strings.Contains(errOut, "shop.Order.total") || !strings.Contains(errOut, "double to float") {
				t.Fatalf("register an incompatible version: exit %d, stderr %q; want exit 1 naming shop.Order.total", code, errOut)
			}
			if vs, _ := set.SubjectVersions(t.Context(), "shop.Order", true); len(vs) != 1 {
				t.Fatalf("after the refused registration shop.Order has %d versions, want 1", len(vs))
			}
			if _, errOut, code = run("register", "shop.Order", "testdata/schemas/nope.avsc"); code != 1 || !strings.Contains(errOut, "cannot be read") {
				t.Fatalf("register a missing file: exit %d, %q", code, errOut)
			}
			if _, errOut, code = run("register", "shop.Order", "testdata/schemas/check"); code != 2 || !strings.Contains(errOut, "--type") {
				t.Fatalf("register a file of no known type: exit %d, %q; want a usage error naming --type", code, errOut)
			}
			if _, errOut, code = run("show", "nobody"); code != 1 || !strings.Contains(errOut, `subject "nobody" is not in`) {
				t.Fatalf("show an unknown subject: exit %d, %q", code, errOut)
			}
			if _, errOut, code = run("show", "shop.Order", "7"); code != 1 || !strings.Contains(errOut, "no version 7") {
				t.Fatalf("show an unknown version: exit %d, %q", code, errOut)
			}
		})
	}
}

func TestSchemasUsage(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"check without a path", []string{"schemas", "check"}, "name the schema files"},
		{"show without a subject", []string{"schemas", "show"}, "name the subject"},
		{"register without a file", []string{"schemas", "register", "s"}, "name the subject and the file"},
		{"an unknown format", []string{"schemas", "list", "--format", "xml", "--store", "sqlite:x.db"}, "--format"},
		{"the memory store", []string{"schemas", "list", "--store", "memory:"}, "memory"},
		{"a registry URL that is not http", []string{"schemas", "list", "--registry", "ftp://x"}, "http://"},
		{"a bad version", []string{"schemas", "show", "s", "zero"}, "not a version number"},
		{"--subject with two files", []string{"schemas", "check", "--subject", "s", "--store", "memory:", "testdata/schemas/check"}, "--subject"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := cli(t, tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("acemq-flow %s: exit %d, stderr %q; want 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.want)
			}
		})
	}
}

func TestSchemasHelpHidesSecrets(t *testing.T) {
	t.Setenv("ACEMQ_STORE_URL", "postgres://flow:store-s3cret@db/flows")
	t.Setenv("ACEMQ_ADMIN_TOKEN", "token-s3cret")
	t.Setenv("ACEMQ_SCHEMA_REGISTRY_URL", "https://svc:reg-s3cret@registry:8081")
	for _, sub := range []string{"list", "show", "register", "check"} {
		out, _, code := cli(t, "schemas", sub, "--help")
		if code != 0 || strings.Contains(out, "s3cret") || !strings.Contains(out, "svc:xxxxx@registry") {
			t.Errorf("acemq-flow schemas %s --help: exit %d, want 0, no secret and the registry redacted:\n%s", sub, code, out)
		}
	}
}

func TestSchemasCheckReadsTheAvroTypesOfAFolderOfFlows(t *testing.T) {
	set, where := schemaBackends[0].open(t)
	writeSchemaFixture(t, set, where...)
	out, errOut, code := cli(t, append([]string{"schemas", "check", "testdata/schemas/flows"}, where...)...)
	if code != 1 {
		t.Fatalf("schemas check testdata/schemas/flows: exit %d, want 1 (shop-next's Order is incompatible)\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"shop.yaml:4:3: type Order: shop.Order: compatible", "shop-next.yaml:4:3: type Order: shop.Order: incompatible", "type Fresh: shop.Fresh: a new subject", "1 of 3 schemas"} {
		if !strings.Contains(out, want) {
			t.Errorf("schemas check of the folder lacks %q:\n%s", want, out)
		}
	}
	// The .avsc a type names by $ref is checked as the type, never again
	// as a file of its own subject "order-v3".
	if strings.Contains(out, "order-v3") {
		t.Errorf("schemas check checked the $ref'd .avsc file on its own:\n%s", out)
	}
	if !strings.Contains(errOut, "other-tool.yaml: skipped") {
		t.Errorf("stderr = %q, want the YAML file that is not a flow named as skipped", errOut)
	}
}

func TestSchemasCheckFailsOnAFlowThatDoesNotLoad(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: acemq.flow/v1\nname: shop\ntypes:\n  Order: {avro: {type: record, name: Order, fields: [{name: id, type: strin}]}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, where := schemaBackends[0].open(t)
	_, errOut, code := cli(t, append([]string{"schemas", "check", bad}, where...)...)
	if code != 1 || !strings.Contains(errOut, "does not load") || !strings.Contains(errOut, "bad.yaml:4:71") || !strings.Contains(errOut, "unknown type: strin") {
		t.Errorf("schemas check of a flow with a bad Avro type: exit %d, stderr %q; want 1 with the diagnostic at bad.yaml:4:71", code, errOut)
	}
	_, errOut, code = cli(t, append([]string{"schemas", "check", "--subject", "s", "testdata/schemas/flows/shop.yaml"}, where...)...)
	if code != 2 || !strings.Contains(errOut, "subject:") {
		t.Errorf("schemas check --subject with a flow: exit %d, stderr %q; want a usage error", code, errOut)
	}
}
