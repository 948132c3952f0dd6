package admin_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/hamba/avro/v2/registry"

	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
)

const (
	orderV1 = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"string"}]}`
	orderV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"string"},{"name":"qty","type":"int","default":1}]}`
	// orderBad adds a field without a default: the new schema cannot read
	// what version 2 wrote.
	orderBad = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"string"},{"name":"qty","type":"int","default":1},{"name":"note","type":"string"}]}`
)

// registryServer serves the admin handler over a registry, with token
// (empty: none).
func registryServer(t *testing.T, reg admin.Registry, token string) *httptest.Server {
	t.Helper()
	s, err := admin.New(admin.Options{Addr: "127.0.0.1:0", Token: token, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

// registryStores are the real stores the registry API is tested over.
var registryStores = []struct {
	name string
	open func(t *testing.T) stores.Set
}{
	{"sqlite", func(t *testing.T) stores.Set { return storetest.OpenSQLite(t, stores.Options{}) }},
	{"postgres", func(t *testing.T) stores.Set { return storetest.OpenPostgres(t, stores.Options{}) }},
}

func wantRegistryError(t *testing.T, call string, err error, status, code int) {
	t.Helper()
	var re registry.Error
	if !errors.As(err, &re) || re.StatusCode != status || re.Code != code {
		t.Fatalf("%s = %v (%#v), want HTTP %d error_code %d", call, err, err, status, code)
	}
}

// TestRegistryWithHambaClient drives the registry API with hamba/avro/v2's
// Confluent client, which nobody here wrote.
func TestRegistryWithHambaClient(t *testing.T) {
	for _, st := range registryStores {
		t.Run(st.name, func(t *testing.T) {
			ctx := t.Context()
			srv := registryServer(t, st.open(t), "")
			c, err := registry.NewClient(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			id1, _, err := c.CreateSchema(ctx, "shop.Order-value", orderV1)
			if err != nil {
				t.Fatalf("CreateSchema(v1): %v", err)
			}
			if again, _, err := c.CreateSchema(ctx, "shop.Order-value", strings.ReplaceAll(orderV1, ",", ", ")); err != nil || again != id1 {
				t.Fatalf("CreateSchema(v1 spaced differently) = %d, %v; want id %d", again, err, id1)
			}
			id2, _, err := c.CreateSchema(ctx, "shop.Order-value", orderV2)
			if err != nil || id2 == id1 {
				t.Fatalf("CreateSchema(v2) = %d, %v; want a new id", id2, err)
			}
			got, err := c.GetSchema(ctx, id1)
			if err != nil || got.String() != avro.MustParse(orderV1).String() {
				t.Fatalf("GetSchema(%d) = %v, %v; want v1", id1, got, err)
			}
			// The schema served keeps its defaults: a reader resolving to it
			// needs them.
			info, err := c.GetLatestSchemaInfo(ctx, "shop.Order-value")
			if err != nil || info.ID != id2 || info.Version != 2 {
				t.Fatalf("GetLatestSchemaInfo = %+v, %v; want id %d version 2", info, err, id2)
			}
			if f := info.Schema.(*avro.RecordSchema).Fields()[1]; !f.HasDefault() || f.Default() != 1 {
				t.Fatalf("latest schema's qty field: default %v (has %v), want 1", f.Default(), f.HasDefault())
			}
			if id, _, err := c.IsRegistered(ctx, "shop.Order-value", orderV1); err != nil || id != id1 {
				t.Fatalf("IsRegistered(v1) = %d, %v; want %d", id, err, id1)
			}
			if subjects, err := c.GetSubjects(ctx); err != nil || !slices.Equal(subjects, []string{"shop.Order-value"}) {
				t.Fatalf("GetSubjects = %v, %v", subjects, err)
			}
			if vs, err := c.GetVersions(ctx, "shop.Order-value"); err != nil || !slices.Equal(vs, []int{1, 2}) {
				t.Fatalf("GetVersions = %v, %v; want [1 2]", vs, err)
			}
			if s, err := c.GetSchemaByVersion(ctx, "shop.Order-value", 1); err != nil || s.String() != got.String() {
				t.Fatalf("GetSchemaByVersion(1) = %v, %v", s, err)
			}
			// The same schema in another subject has the same id.
			if id, _, err := c.CreateSchema(ctx, "billing.Order-value", orderV1); err != nil || id != id1 {
				t.Fatalf("CreateSchema(v1) in another subject = %d, %v; want %d", id, err, id1)
			}

			// Incompatible: 409 with error_code 409, and nothing written.
			_, _, err = c.CreateSchema(ctx, "shop.Order-value", orderBad)
			wantRegistryError(t, "CreateSchema(incompatible)", err, 409, 409)
			if !strings.Contains(err.Error(), "shop.Order.note") {
				t.Fatalf("CreateSchema(incompatible) = %q, want the field shop.Order.note named", err)
			}
			if ok, err := c.IsCompatible(ctx, "shop.Order-value", orderBad); err != nil || ok {
				t.Fatalf("IsCompatible(incompatible) = %v, %v; want false", ok, err)
			}
			if ok, err := c.IsCompatible(ctx, "shop.Order-value", orderV2); err != nil || !ok {
				t.Fatalf("IsCompatible(v2) = %v, %v; want true", ok, err)
			}

			// Not found, with Confluent's codes.
			_, err = c.GetSchema(ctx, id2+100)
			wantRegistryError(t, "GetSchema(unknown id)", err, 404, 40403)
			_, err = c.GetVersions(ctx, "nobody")
			wantRegistryError(t, "GetVersions(unknown subject)", err, 404, 40401)
			_, err = c.GetSchemaInfo(ctx, "shop.Order-value", 7)
			wantRegistryError(t, "GetSchemaInfo(unknown version)", err, 404, 40402)
			_, _, err = c.IsRegistered(ctx, "shop.Order-value", orderBad)
			wantRegistryError(t, "IsRegistered(unregistered schema)", err, 404, 40403)
			_, _, err = c.IsRegistered(ctx, "nobody", orderV1)
			wantRegistryError(t, "IsRegistered(unknown subject)", err, 404, 40401)
			_, _, err = c.CreateSchema(ctx, "shop.Order-value", `{"type":"record","name":"Order"}`)
			wantRegistryError(t, "CreateSchema(invalid)", err, 422, 42201)

			// A subject's level: NONE lets the incompatible version in.
			if err := c.SetCompatibilityLevel(ctx, "shop.Order-value", "NONE"); err != nil {
				t.Fatal(err)
			}
			if l, err := c.GetCompatibilityLevel(ctx, "shop.Order-value"); err != nil || l != "NONE" {
				t.Fatalf("GetCompatibilityLevel = %q, %v; want NONE", l, err)
			}
			if l, err := c.GetGlobalCompatibilityLevel(ctx); err != nil || l != "BACKWARD" {
				t.Fatalf("GetGlobalCompatibilityLevel = %q, %v; want BACKWARD", l, err)
			}
			id3, _, err := c.CreateSchema(ctx, "shop.Order-value", orderBad)
			if err != nil {
				t.Fatalf("CreateSchema under NONE: %v", err)
			}

			// A soft delete hides the subject; its ids still resolve.
			if vs, err := c.DeleteSubject(ctx, "shop.Order-value"); err != nil || !slices.Equal(vs, []int{1, 2, 3}) {
				t.Fatalf("DeleteSubject = %v, %v; want [1 2 3]", vs, err)
			}
			if subjects, err := c.GetSubjects(ctx); err != nil || !slices.Equal(subjects, []string{"billing.Order-value"}) {
				t.Fatalf("GetSubjects after the delete = %v, %v", subjects, err)
			}
			fresh, _ := registry.NewClient(srv.URL) // no cache
			for _, id := range []int{id1, id2, id3} {
				if _, err := fresh.GetSchema(ctx, id); err != nil {
					t.Fatalf("GetSchema(%d) after the soft delete: %v", id, err)
				}
			}
		})
	}
}

func TestRegistryAnswersAsConfluentDoes(t *testing.T) {
	reg := storetest.OpenSQLite(t, stores.Options{})
	srv := registryServer(t, reg, "")
	if _, _, err := reg.RegisterSchema(t.Context(), "shop.Invoice", stores.SchemaJSON, `{"type":"object"}`); err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) (int, string, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", admin.RegistryContentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, resp.Header.Get("Content-Type"), out
	}
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     float64 // error_code; 0 for a success
	}{
		{"a JSON Schema by version carries its schemaType", "GET", "/subjects/shop.Invoice/versions/latest", "", 200, 0},
		{"a version that is not a number is 42202", "GET", "/subjects/shop.Invoice/versions/abc", "", 422, 42202},
		{"version 0 is 42202", "GET", "/subjects/shop.Invoice/versions/0", "", 422, 42202},
		{"an unknown version of a known subject is 40402", "GET", "/subjects/shop.Invoice/versions/9", "", 404, 40402},
		{"an unknown subject is 40401", "GET", "/subjects/nobody/versions/1", "", 404, 40401},
		{"an id that is not a number is 40403", "GET", "/schemas/ids/x", "", 404, 40403},
		{"a body that is not JSON is 400", "POST", "/subjects/shop.Invoice/versions", "{", 400, 400},
		{"an invalid JSON Schema is 42201", "POST", "/subjects/shop.Invoice/versions", `{"schemaType":"JSON","schema":"{\"type\":5}"}`, 422, 42201},
		{"Protobuf is 42201", "POST", "/subjects/shop.Invoice/versions", `{"schemaType":"PROTOBUF","schema":"syntax = \"proto3\";"}`, 422, 42201},
		{"references are 42201", "POST", "/subjects/shop.Invoice/versions", `{"schema":"\"string\"","references":[{"name":"x","subject":"y","version":1}]}`, 422, 42201},
		{"an incompatible JSON Schema is 409", "POST", "/subjects/shop.Invoice/versions", `{"schemaType":"JSON","schema":"{\"type\":\"string\"}"}`, 409, 409},
		{"a permanent delete is refused with 42205", "DELETE", "/subjects/shop.Invoice?permanent=true", "", 422, 42205},
		{"an unknown level is 42203", "PUT", "/config/shop.Invoice", `{"compatibility":"SIDEWAYS"}`, 422, 42203},
		{"a level is set", "PUT", "/config/shop.Invoice", `{"compatibility":"FULL"}`, 200, 0},
		{"a compatibility check against one version", "POST", "/compatibility/subjects/shop.Invoice/versions/1?verbose=true", `{"schemaType":"JSON","schema":"{\"type\":\"string\"}"}`, 200, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, ctype, out := call(tc.method, tc.path, tc.body)
			if status != tc.status || ctype != admin.RegistryContentType {
				t.Fatalf("%s %s = %d %s %v, want %d %s", tc.method, tc.path, status, ctype, out, tc.status, admin.RegistryContentType)
			}
			if got, _ := out["error_code"].(float64); got != tc.code {
				t.Fatalf("%s %s: error_code %v (%v), want %v", tc.method, tc.path, out["error_code"], out["message"], tc.code)
			}
		})
	}
	_, _, v := call("GET", "/subjects/shop.Invoice/versions/1", "")
	if v["schemaType"] != "JSON" || v["schema"] != `{"type":"object"}` || v["version"] != 1.0 {
		t.Fatalf("GET version 1 = %v, want schemaType JSON, the canonical schema, version 1", v)
	}
	_, _, c := call("POST", "/compatibility/subjects/shop.Invoice/versions/1?verbose=true", `{"schemaType":"JSON","schema":"{\"type\":\"string\"}"}`)
	msgs, _ := c["messages"].([]any)
	if c["is_compatible"] != false || len(msgs) != 1 || !strings.Contains(msgs[0].(string), "at $") {
		t.Fatalf("compatibility check = %v, want is_compatible false and a message naming the path", c)
	}
}

func TestRegistryNeedsTheToken(t *testing.T) {
	srv := registryServer(t, storetest.OpenSQLite(t, stores.Options{}), "s3cret")
	ctx := t.Context()
	anon, _ := registry.NewClient(srv.URL)
	_, err := anon.GetSubjects(ctx)
	wantRegistryError(t, "GetSubjects without the token", err, 401, 401)
	_, _, err = anon.CreateSchema(ctx, "s", orderV1)
	wantRegistryError(t, "CreateSchema without the token", err, 401, 401)
	wrong, _ := registry.NewClient(srv.URL, registry.WithBasicAuth("svc", "guess"))
	_, err = wrong.GetSubjects(ctx)
	wantRegistryError(t, "GetSubjects with a wrong password", err, 401, 401)
	c, _ := registry.NewClient(srv.URL, registry.WithBasicAuth("svc", "s3cret"))
	if _, _, err := c.CreateSchema(ctx, "s", orderV1); err != nil {
		t.Fatalf("CreateSchema with the token as basic auth password: %v", err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/subjects", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /subjects with the bearer token = %d, want 200", resp.StatusCode)
	}
}
