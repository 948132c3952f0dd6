package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// RunSchemas runs the cases of stores.Schemas, the schema registry: one id
// per canonical schema for ever, versions per subject, compatibility
// checked when registering, soft delete only.
func RunSchemas(t *testing.T, open Opener, f Features) {
	cases := []struct {
		name string
		run  func(t *testing.T, open Opener, f Features)
	}{
		{"the same canonical schema gets the same id in every subject, however it is spaced or its keys ordered", schemaSameID},
		{"versions count from 1 per subject and read back by number, latest, lookup and listing", schemaVersions},
		{"an incompatible version is refused naming the first incompatible field, and writes nothing", schemaIncompatible},
		{"an invalid schema or an unsupported type is refused as invalid", schemaInvalid},
		{"a soft-deleted subject's ids still resolve, and registering again continues its versions", schemaSoftDelete},
		{"a subject's compatibility level is its own, else the registry's default, else BACKWARD", schemaLevels},
		{"unknown ids, subjects and versions read as absent, not as errors", schemaAbsent},
		{"racing registrations on two handles: one id per schema, one version per schema, no id given twice", schemaRace},
		{"the purge leaves the registry alone: old and soft-deleted schemas still resolve", schemaPurge},
		{"ids survive reopening, and a schema registered after it gets an id never given before", schemaDurable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open, f) })
	}
}

// orderV returns version n of the suite's Avro record shop.Order: each
// adds a field with a default, so each is BACKWARD and FORWARD compatible
// with the one before.
func orderV(n int) string {
	fields := `{"name": "id", "type": "string"}`
	for i := 2; i <= n; i++ {
		fields += fmt.Sprintf(`, {"name": "f%d", "type": "int", "default": 0}`, i)
	}
	return `{"type": "record", "name": "Order", "namespace": "shop", "fields": [` + fields + `]}`
}

func register(t *testing.T, s stores.Schemas, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool) {
	t.Helper()
	v, created, err := s.RegisterSchema(t.Context(), subject, typ, text)
	if err != nil {
		t.Fatalf("RegisterSchema(%s, %s): %v", subject, text, err)
	}
	return v, created
}

func schemaSameID(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	s := b.Set
	first, created := register(t, s, "shop.Order", stores.SchemaAvro, orderV(1))
	if !created || first.Version != 1 || first.ID < 1 {
		t.Fatalf("first RegisterSchema = version %d id %d created %v, want version 1, an id > 0, created", first.Version, first.ID, created)
	}
	if first.Type != stores.SchemaAvro || first.Canonical != `{"name":"shop.Order","type":"record","fields":[{"name":"id","type":"string"}]}` {
		t.Fatalf("registered type %q canonical %s, want AVRO and the Parsing Canonical Form", first.Type, first.Canonical)
	}
	// Spacing, key order and a doc are not part of the canonical form.
	again, created := register(t, s, "shop.Order", "", `{"fields":[{"type":"string","name":"id","doc":"the order id"}],"name":"Order","namespace":"shop","type":"record"}`)
	if created || again.ID != first.ID || again.Version != 1 {
		t.Fatalf("RegisterSchema of the same schema written differently = id %d version %d created %v, want id %d version 1 not created", again.ID, again.Version, created, first.ID)
	}
	other, created := register(t, s, "billing.Order", stores.SchemaAvro, orderV(1))
	if !created || other.ID != first.ID || other.Version != 1 {
		t.Fatalf("RegisterSchema in another subject = id %d version %d created %v, want the same id %d, version 1, created", other.ID, other.Version, created, first.ID)
	}
	j1, _ := register(t, s, "shop.Invoice", stores.SchemaJSON, `{"type": "object", "properties": {"total": {"type": "number"}}}`)
	j2, created := register(t, s, "billing.Invoice", stores.SchemaJSON, "{\"properties\":{\"total\":{\"type\":\"number\"}},\n  \"type\":\"object\"}")
	if j2.ID != j1.ID || !created {
		t.Fatalf("the same JSON Schema with its keys reordered got id %d, want %d", j2.ID, j1.ID)
	}
	if j1.ID == first.ID || j1.Canonical != `{"properties":{"total":{"type":"number"}},"type":"object"}` {
		t.Fatalf("JSON Schema id %d (Avro's %d), canonical %s; want an id of its own and canonical JSON", j1.ID, first.ID, j1.Canonical)
	}
}

func schemaVersions(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	s, ctx := b.Set, t.Context()
	var ids []int
	for n := 1; n <= 3; n++ {
		v, _ := register(t, s, "shop.Order", stores.SchemaAvro, orderV(n))
		if v.Version != n {
			t.Fatalf("RegisterSchema of version %d = version %d", n, v.Version)
		}
		if !v.RegisteredAt.Equal(clock.Now()) {
			t.Fatalf("version %d registered at %s, want the store's clock %s", n, v.RegisteredAt, clock.Now())
		}
		ids = append(ids, v.ID)
		clock.Advance(time.Second)
	}
	if ids[0] == ids[1] || ids[1] == ids[2] || ids[0] == ids[2] {
		t.Fatalf("three different schemas got ids %v, want three different ids", ids)
	}
	v2, ok, err := s.SchemaVersion(ctx, "shop.Order", 2)
	if err != nil || !ok || v2.ID != ids[1] || v2.Subject != "shop.Order" || v2.Deleted {
		t.Fatalf("SchemaVersion(shop.Order, 2) = %+v, %v, %v; want id %d", v2, ok, err, ids[1])
	}
	latest, ok, err := s.SchemaVersion(ctx, "shop.Order", stores.LatestVersion)
	if err != nil || !ok || latest.Version != 3 || latest.ID != ids[2] {
		t.Fatalf("SchemaVersion(shop.Order, latest) = version %d id %d, %v, %v; want version 3 id %d", latest.Version, latest.ID, ok, err, ids[2])
	}
	found, ok, err := s.LookupSchema(ctx, "shop.Order", stores.SchemaAvro, orderV(2))
	if err != nil || !ok || found.Version != 2 || found.ID != ids[1] {
		t.Fatalf("LookupSchema(shop.Order, v2) = version %d id %d, %v, %v; want version 2 id %d", found.Version, found.ID, ok, err, ids[1])
	}
	if _, ok, err := s.LookupSchema(ctx, "shop.Order", stores.SchemaAvro, orderV(4)); err != nil || ok {
		t.Fatalf("LookupSchema of a schema never registered = %v, %v; want absent", ok, err)
	}
	vs, err := s.SubjectVersions(ctx, "shop.Order", false)
	if err != nil {
		t.Fatal(err)
	}
	var nums []int
	for _, v := range vs {
		nums = append(nums, v.Version)
	}
	if !slices.Equal(nums, []int{1, 2, 3}) {
		t.Fatalf("SubjectVersions(shop.Order) = %v, want [1 2 3]", nums)
	}
	sc, ok, err := s.SchemaByID(ctx, ids[2])
	if err != nil || !ok || sc.Text != vs[2].Text || sc.Type != stores.SchemaAvro {
		t.Fatalf("SchemaByID(%d) = %+v, %v, %v; want version 3's schema", ids[2], sc, ok, err)
	}
	// The text served keeps what the canonical form drops: a reader's
	// defaults.
	if !strings.Contains(sc.Text, `"default":0`) {
		t.Fatalf("SchemaByID(%d).Text = %s, want the schema with its defaults", ids[2], sc.Text)
	}
	register(t, s, "audit.Event", stores.SchemaAvro, `"string"`)
	subjects, err := s.Subjects(ctx, false)
	if err != nil || !slices.Equal(subjects, []string{"audit.Event", "shop.Order"}) {
		t.Fatalf("Subjects = %v, %v; want [audit.Event shop.Order]", subjects, err)
	}
}

func schemaIncompatible(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	s, ctx := b.Set, t.Context()
	register(t, s, "shop.Order", stores.SchemaAvro, orderV(2))
	// A new field without a default: the new schema cannot read what
	// version 1 wrote (BACKWARD, the default).
	breaking := `{"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "id", "type": "string"}, {"name": "f2", "type": "int", "default": 0}, {"name": "note", "type": "string"}]}`
	_, _, err := s.RegisterSchema(ctx, "shop.Order", stores.SchemaAvro, breaking)
	var ie *stores.IncompatibleSchemaError
	if !errors.As(err, &ie) || !errors.Is(err, stores.ErrIncompatibleSchema) {
		t.Fatalf("RegisterSchema of a field without a default = %v, want an *IncompatibleSchemaError", err)
	}
	if ie.Subject != "shop.Order" || ie.Version != 1 || ie.Path != "shop.Order.note" || ie.Level != stores.CompatBackward || ie.Direction != "backward" {
		t.Fatalf("IncompatibleSchemaError = %+v, want subject shop.Order, version 1, path shop.Order.note, BACKWARD, backward", *ie)
	}
	if vs, _ := s.SubjectVersions(ctx, "shop.Order", true); len(vs) != 1 {
		t.Fatalf("after a refused registration the subject has %d versions, want 1", len(vs))
	}
	// A type change Avro does not promote, inside a nested record.
	register(t, s, "shop.Line", stores.SchemaAvro, `{"type":"record","name":"Line","fields":[{"name":"item","type":{"type":"record","name":"Item","fields":[{"name":"qty","type":"long"}]}}]}`)
	_, _, err = s.RegisterSchema(ctx, "shop.Line", stores.SchemaAvro, `{"type":"record","name":"Line","fields":[{"name":"item","type":{"type":"record","name":"Item","fields":[{"name":"qty","type":"int"}]}}]}`)
	if !errors.As(err, &ie) || ie.Path != "Line.item.qty" {
		t.Fatalf("RegisterSchema narrowing long to int = %v, want incompatible at Line.item.qty", err)
	}
	// JSON Schema: a property newly required.
	register(t, s, "shop.Invoice", stores.SchemaJSON, `{"type":"object","properties":{"total":{"type":"number"}}}`)
	_, _, err = s.RegisterSchema(ctx, "shop.Invoice", stores.SchemaJSON, `{"type":"object","properties":{"total":{"type":"number"}},"required":["total"]}`)
	if !errors.As(err, &ie) || ie.Path != "$.total" {
		t.Fatalf("RegisterSchema requiring a property = %v, want incompatible at $.total", err)
	}
	// NONE lets it in.
	if err := s.SetCompatibility(ctx, "shop.Order", stores.CompatNone); err != nil {
		t.Fatal(err)
	}
	if v, _ := register(t, s, "shop.Order", stores.SchemaAvro, breaking); v.Version != 2 {
		t.Fatalf("RegisterSchema under NONE = version %d, want 2", v.Version)
	}
}

func schemaInvalid(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	s, ctx := b.Set, t.Context()
	for _, tc := range []struct {
		typ  stores.SchemaType
		text string
	}{
		{stores.SchemaAvro, `{"type": "record", "name": "Order"}`},
		{stores.SchemaAvro, `not json`},
		{stores.SchemaJSON, `{"type": 12}`},
		{stores.SchemaJSON, `[1, 2]`},
		{"PROTOBUF", `syntax = "proto3";`},
	} {
		_, _, err := s.RegisterSchema(ctx, "shop.Bad", tc.typ, tc.text)
		var ie *stores.InvalidSchemaError
		if !errors.As(err, &ie) || !errors.Is(err, stores.ErrInvalidSchema) || ie.Subject != "shop.Bad" {
			t.Errorf("RegisterSchema(%s %s) = %v, want an *InvalidSchemaError of subject shop.Bad", tc.typ, tc.text, err)
		}
	}
	if subjects, err := s.Subjects(ctx, true); err != nil || len(subjects) != 0 {
		t.Fatalf("after refused registrations Subjects = %v, %v; want none", subjects, err)
	}
	if _, _, err := s.RegisterSchema(ctx, "", stores.SchemaAvro, `"string"`); err == nil {
		t.Fatal("RegisterSchema with an empty subject: nil error, want an error")
	}
}

func schemaSoftDelete(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	s, ctx := b.Set, t.Context()
	v1, _ := register(t, s, "shop.Order", stores.SchemaAvro, orderV(1))
	v2, _ := register(t, s, "shop.Order", stores.SchemaAvro, orderV(2))
	register(t, s, "audit.Event", stores.SchemaAvro, `"string"`)
	deleted, err := s.DeleteSubject(ctx, "shop.Order")
	if err != nil || !slices.Equal(deleted, []int{1, 2}) {
		t.Fatalf("DeleteSubject(shop.Order) = %v, %v; want [1 2]", deleted, err)
	}
	if again, err := s.DeleteSubject(ctx, "shop.Order"); err != nil || len(again) != 0 {
		t.Fatalf("DeleteSubject of a deleted subject = %v, %v; want none", again, err)
	}
	for _, id := range []int{v1.ID, v2.ID} {
		if _, ok, err := s.SchemaByID(ctx, id); err != nil || !ok {
			t.Fatalf("SchemaByID(%d) after the soft delete = %v, %v; want it to resolve", id, ok, err)
		}
	}
	if subjects, _ := s.Subjects(ctx, false); !slices.Equal(subjects, []string{"audit.Event"}) {
		t.Fatalf("Subjects after the soft delete = %v, want [audit.Event]", subjects)
	}
	if subjects, _ := s.Subjects(ctx, true); !slices.Equal(subjects, []string{"audit.Event", "shop.Order"}) {
		t.Fatalf("Subjects(deleted) = %v, want [audit.Event shop.Order]", subjects)
	}
	if vs, _ := s.SubjectVersions(ctx, "shop.Order", false); len(vs) != 0 {
		t.Fatalf("SubjectVersions(shop.Order) after the soft delete = %d versions, want none", len(vs))
	}
	if vs, _ := s.SubjectVersions(ctx, "shop.Order", true); len(vs) != 2 || !vs[0].Deleted || !vs[1].Deleted {
		t.Fatalf("SubjectVersions(shop.Order, deleted) = %+v, want 2 deleted versions", vs)
	}
	if _, ok, _ := s.SchemaVersion(ctx, "shop.Order", stores.LatestVersion); ok {
		t.Fatal("SchemaVersion(latest) of a deleted subject: found, want absent")
	}
	// Registering again: a new version after the highest, the schema's
	// own id kept.
	v3, created := register(t, s, "shop.Order", stores.SchemaAvro, orderV(1))
	if !created || v3.Version != 3 || v3.ID != v1.ID {
		t.Fatalf("RegisterSchema after the soft delete = version %d id %d created %v, want version 3, id %d, created", v3.Version, v3.ID, created, v1.ID)
	}
}

func schemaLevels(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	s, ctx := b.Set, t.Context()
	level := func(subject string) stores.Compatibility {
		t.Helper()
		l, err := s.Compatibility(ctx, subject)
		if err != nil {
			t.Fatalf("Compatibility(%q): %v", subject, err)
		}
		return l
	}
	if l := level("shop.Order"); l != stores.CompatBackward {
		t.Fatalf("Compatibility of a subject never configured = %s, want BACKWARD", l)
	}
	if err := s.SetCompatibility(ctx, "", stores.CompatFull); err != nil {
		t.Fatal(err)
	}
	if err := s.SetCompatibility(ctx, "shop.Order", stores.CompatForwardTransitive); err != nil {
		t.Fatal(err)
	}
	if l := level("shop.Order"); l != stores.CompatForwardTransitive {
		t.Fatalf("Compatibility(shop.Order) = %s, want its own FORWARD_TRANSITIVE", l)
	}
	if l := level("audit.Event"); l != stores.CompatFull {
		t.Fatalf("Compatibility(audit.Event) = %s, want the registry's FULL", l)
	}
	if l := level(""); l != stores.CompatFull {
		t.Fatalf("Compatibility(\"\") = %s, want FULL", l)
	}
	if err := s.SetCompatibility(ctx, "shop.Order", "SIDEWAYS"); err == nil {
		t.Fatal("SetCompatibility(SIDEWAYS): nil error, want an error")
	}
	if err := s.SetCompatibility(ctx, "shop.Order", stores.CompatNone); err != nil {
		t.Fatal(err)
	}
	if l := level("shop.Order"); l != stores.CompatNone {
		t.Fatalf("Compatibility(shop.Order) after a second set = %s, want NONE", l)
	}
	// FORWARD_TRANSITIVE on another subject: every version must read the
	// new one, so removing a field without a default that v1 needs fails.
	if err := s.SetCompatibility(ctx, "shop.Line", stores.CompatForwardTransitive); err != nil {
		t.Fatal(err)
	}
	register(t, s, "shop.Line", stores.SchemaAvro, `{"type":"record","name":"Line","fields":[{"name":"a","type":"int"},{"name":"b","type":"int"}]}`)
	register(t, s, "shop.Line", stores.SchemaAvro, `{"type":"record","name":"Line","fields":[{"name":"a","type":"int"},{"name":"b","type":"int"},{"name":"c","type":"int"}]}`)
	_, _, err := s.RegisterSchema(ctx, "shop.Line", stores.SchemaAvro, `{"type":"record","name":"Line","fields":[{"name":"a","type":"int"},{"name":"c","type":"int"}]}`)
	var ie *stores.IncompatibleSchemaError
	if !errors.As(err, &ie) || ie.Direction != "forward" || ie.Path != "Line.b" {
		t.Fatalf("RegisterSchema dropping b under FORWARD_TRANSITIVE = %v, want forward incompatible at Line.b", err)
	}
}

func schemaAbsent(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	s, ctx := b.Set, t.Context()
	v, _ := register(t, s, "shop.Order", stores.SchemaAvro, orderV(1))
	if _, ok, err := s.SchemaByID(ctx, v.ID+1000); err != nil || ok {
		t.Fatalf("SchemaByID of an unknown id = %v, %v; want absent", ok, err)
	}
	if _, ok, err := s.SchemaVersion(ctx, "shop.Order", 2); err != nil || ok {
		t.Fatalf("SchemaVersion of an unknown version = %v, %v; want absent", ok, err)
	}
	if _, ok, err := s.SchemaVersion(ctx, "nobody", stores.LatestVersion); err != nil || ok {
		t.Fatalf("SchemaVersion of an unknown subject = %v, %v; want absent", ok, err)
	}
	if vs, err := s.SubjectVersions(ctx, "nobody", true); err != nil || len(vs) != 0 {
		t.Fatalf("SubjectVersions of an unknown subject = %v, %v; want none", vs, err)
	}
	if vs, err := s.DeleteSubject(ctx, "nobody"); err != nil || len(vs) != 0 {
		t.Fatalf("DeleteSubject of an unknown subject = %v, %v; want none", vs, err)
	}
}

func schemaRace(t *testing.T, open Opener, _ Features) {
	b, _ := fixture(t, open)
	handles := []stores.Set{b.Set, b.Peer(t)}
	if err := b.Set.SetCompatibility(t.Context(), "race.many", stores.CompatNone); err != nil {
		t.Fatal(err)
	}
	const goroutines = 16
	type result struct {
		subject string
		v       stores.SchemaVersion
		created bool
		err     error
	}
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]result, 3*goroutines)
	)
	for g := range goroutines {
		// Every goroutine registers: the same schema in one subject; the
		// same schema, each in a subject of its own; and a schema of its
		// own in one subject.
		jobs := []struct{ subject, text string }{
			{"race.same", orderV(1)},
			{fmt.Sprintf("race.own%02d", g), `{"type":"record","name":"Shared","fields":[{"name":"x","type":"int"}]}`},
			{"race.many", orderV(g + 2)},
		}
		for j, job := range jobs {
			wg.Go(func() {
				<-start
				v, created, err := handles[g%2].RegisterSchema(t.Context(), job.subject, stores.SchemaAvro, job.text)
				results[3*g+j] = result{job.subject, v, created, err}
			})
		}
	}
	close(start)
	wg.Wait()
	var sameID, sharedID int
	created, manyVersions, manyIDs := 0, map[int]bool{}, map[int]bool{}
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("RegisterSchema(%s): %v", r.subject, r.err)
		}
		switch {
		case r.subject == "race.same":
			if sameID == 0 {
				sameID = r.v.ID
			}
			if r.v.ID != sameID || r.v.Version != 1 {
				t.Fatalf("race.same: id %d version %d, want every registration id %d version 1", r.v.ID, r.v.Version, sameID)
			}
			if r.created {
				created++
			}
		case r.subject == "race.many":
			manyVersions[r.v.Version] = true
			manyIDs[r.v.ID] = true
		default:
			if sharedID == 0 {
				sharedID = r.v.ID
			}
			if r.v.ID != sharedID || r.v.Version != 1 || !r.created {
				t.Fatalf("%s: id %d version %d created %v, want id %d, version 1, created", r.subject, r.v.ID, r.v.Version, r.created, sharedID)
			}
		}
	}
	if created != 1 {
		t.Fatalf("race.same: %d registrations created the version, want exactly 1", created)
	}
	if len(manyVersions) != goroutines || len(manyIDs) != goroutines || manyIDs[sameID] || manyIDs[sharedID] {
		t.Fatalf("race.many: versions %v ids %v, want %d distinct versions with %d ids of their own", manyVersions, manyIDs, goroutines, goroutines)
	}
	for v := 1; v <= goroutines; v++ {
		if !manyVersions[v] {
			t.Fatalf("race.many: versions %v, want 1 to %d without a gap", manyVersions, goroutines)
		}
	}
	// Every id resolves to the schema registered with it.
	for _, r := range results {
		sc, ok, err := b.Set.SchemaByID(t.Context(), r.v.ID)
		if err != nil || !ok || sc.Canonical != r.v.Canonical {
			t.Fatalf("SchemaByID(%d) = %+v, %v, %v; want the schema %s", r.v.ID, sc, ok, err, r.v.Canonical)
		}
	}
}

func schemaPurge(t *testing.T, open Opener, _ Features) {
	b, clock := fixture(t, open)
	s, ctx := b.Set, t.Context()
	v, _ := register(t, s, "shop.Order", stores.SchemaAvro, orderV(1))
	kept, _ := register(t, s, "audit.Event", stores.SchemaAvro, `"string"`)
	if _, err := s.DeleteSubject(ctx, "shop.Order"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(365 * 24 * time.Hour)
	if _, err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{v.ID, kept.ID} {
		if _, ok, err := s.SchemaByID(ctx, id); err != nil || !ok {
			t.Fatalf("SchemaByID(%d) after a purge a year on = %v, %v; want it to resolve", id, ok, err)
		}
	}
	if vs, _ := s.SubjectVersions(ctx, "shop.Order", true); len(vs) != 1 {
		t.Fatalf("the soft-deleted subject has %d versions after the purge, want 1", len(vs))
	}
	if got, ok, _ := s.SchemaVersion(ctx, "audit.Event", 1); !ok || got.ID != kept.ID {
		t.Fatalf("audit.Event version 1 after the purge = %+v, %v; want id %d", got, ok, kept.ID)
	}
}

func schemaDurable(t *testing.T, open Opener, f Features) {
	if !f.Durable {
		t.Skip("this backend keeps nothing after Close")
	}
	b, _ := fixture(t, open)
	var ids []int
	for n := 1; n <= 3; n++ {
		v, _ := register(t, b.Set, "shop.Order", stores.SchemaAvro, orderV(n))
		ids = append(ids, v.ID)
	}
	if err := b.Set.SetCompatibility(t.Context(), "shop.Order", stores.CompatFull); err != nil {
		t.Fatal(err)
	}
	if err := b.Set.Close(); err != nil {
		t.Fatal(err)
	}
	peer := b.Peer(t)
	for i, id := range ids {
		sc, ok, err := peer.SchemaByID(t.Context(), id)
		if err != nil || !ok {
			t.Fatalf("SchemaByID(%d) after reopening = %v, %v; want it to resolve", id, ok, err)
		}
		if p, _, _ := peer.LookupSchema(t.Context(), "shop.Order", stores.SchemaAvro, orderV(i+1)); p.ID != id || p.Canonical != sc.Canonical {
			t.Fatalf("LookupSchema(v%d) after reopening = id %d, want %d", i+1, p.ID, id)
		}
	}
	if l, err := peer.Compatibility(t.Context(), "shop.Order"); err != nil || l != stores.CompatFull {
		t.Fatalf("Compatibility after reopening = %s, %v; want FULL", l, err)
	}
	v4, _ := register(t, peer, "shop.Order", stores.SchemaAvro, orderV(4))
	if slices.Contains(ids, v4.ID) || v4.ID <= slices.Max(ids) || v4.Version != 4 {
		t.Fatalf("a new schema after reopening got id %d version %d; want an id above %v and version 4", v4.ID, v4.Version, ids)
	}
}
