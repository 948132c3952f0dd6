package memory

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
	"github.com/acemq/acemq-flow/stores/schemacompat"
)

var _ stores.Schemas = (*Store)(nil)

// registry is the schema registry's state, guarded by the store's mutex.
type registry struct {
	schemas  []stores.Schema         // id i+1 at index i
	byPrint  map[string]int          // fingerprint → id
	versions map[string][]memVersion // subject → versions, oldest first
	levels   map[string]stores.Compatibility
}

type memVersion struct {
	version int
	id      int
	at      time.Time
	deleted bool
}

func (r *registry) init() {
	if r.byPrint == nil {
		r.byPrint = map[string]int{}
		r.versions = map[string][]memVersion{}
		r.levels = map[string]stores.Compatibility{}
	}
}

func (r *registry) version(subject string, v memVersion) stores.SchemaVersion {
	return stores.SchemaVersion{Subject: subject, Version: v.version, Schema: r.schemas[v.id-1], RegisteredAt: v.at, Deleted: v.deleted}
}

func (r *registry) live(subject string) []stores.SchemaVersion {
	var out []stores.SchemaVersion
	for _, v := range r.versions[subject] {
		if !v.deleted {
			out = append(out, r.version(subject, v))
		}
	}
	return out
}

// schemaTx is backend.SchemaTx over the maps, under the store's mutex.
type schemaTx struct{ r *registry }

func (t schemaTx) LiveVersions(_ context.Context, subject string) ([]stores.SchemaVersion, error) {
	return t.r.live(subject), nil
}

func (t schemaTx) Level(_ context.Context, subject string) (stores.Compatibility, error) {
	return backend.EffectiveLevel(string(t.r.levels[subject]), string(t.r.levels[""])), nil
}

func (t schemaTx) SchemaID(_ context.Context, fp string) (int, bool, error) {
	id, ok := t.r.byPrint[fp]
	return id, ok, nil
}

func (t schemaTx) InsertSchema(_ context.Context, p *schemacompat.Parsed, _ time.Time) (int, error) {
	id := len(t.r.schemas) + 1
	t.r.schemas = append(t.r.schemas, stores.Schema{ID: id, Type: p.Type, Text: p.Text, Canonical: p.Canonical})
	t.r.byPrint[p.Fingerprint()] = id
	return id, nil
}

func (t schemaTx) MaxVersion(_ context.Context, subject string) (int, error) {
	vs := t.r.versions[subject]
	if len(vs) == 0 {
		return 0, nil
	}
	return vs[len(vs)-1].version, nil
}

func (t schemaTx) InsertVersion(_ context.Context, subject string, version, id int, now time.Time) error {
	t.r.versions[subject] = append(t.r.versions[subject], memVersion{version: version, id: id, at: now})
	return nil
}

// RegisterSchema implements stores.Schemas.
func (s *Store) RegisterSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error) {
	p, err := backend.PrepareSchema(subject, typ, text)
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	if err := s.lock(ctx); err != nil {
		return stores.SchemaVersion{}, false, err
	}
	defer s.mu.Unlock()
	s.reg.init()
	return backend.RegisterSchema(ctx, schemaTx{&s.reg}, subject, p, s.opts.Now().Truncate(time.Millisecond))
}

// LookupSchema implements stores.Schemas.
func (s *Store) LookupSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error) {
	p, err := backend.PrepareSchema(subject, typ, text)
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	if err := s.lock(ctx); err != nil {
		return stores.SchemaVersion{}, false, err
	}
	defer s.mu.Unlock()
	s.reg.init()
	v, ok := backend.FindCanonical(s.reg.live(subject), p)
	return v, ok, nil
}

// SchemaByID implements stores.Schemas.
func (s *Store) SchemaByID(ctx context.Context, id int) (stores.Schema, bool, error) {
	if err := s.lock(ctx); err != nil {
		return stores.Schema{}, false, err
	}
	defer s.mu.Unlock()
	if id < 1 || id > len(s.reg.schemas) {
		return stores.Schema{}, false, nil
	}
	return s.reg.schemas[id-1], true, nil
}

// SchemaVersion implements stores.Schemas.
func (s *Store) SchemaVersion(ctx context.Context, subject string, version int) (stores.SchemaVersion, bool, error) {
	if err := s.lock(ctx); err != nil {
		return stores.SchemaVersion{}, false, err
	}
	defer s.mu.Unlock()
	s.reg.init()
	live := s.reg.live(subject)
	if version == stores.LatestVersion && len(live) > 0 {
		return live[len(live)-1], true, nil
	}
	for _, v := range live {
		if v.Version == version {
			return v, true, nil
		}
	}
	return stores.SchemaVersion{}, false, nil
}

// SubjectVersions implements stores.Schemas.
func (s *Store) SubjectVersions(ctx context.Context, subject string, deleted bool) ([]stores.SchemaVersion, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	s.reg.init()
	if !deleted {
		return s.reg.live(subject), nil
	}
	var out []stores.SchemaVersion
	for _, v := range s.reg.versions[subject] {
		out = append(out, s.reg.version(subject, v))
	}
	return out, nil
}

// Subjects implements stores.Schemas.
func (s *Store) Subjects(ctx context.Context, deleted bool) ([]string, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	s.reg.init()
	var out []string
	for subject, vs := range s.reg.versions {
		if deleted || slices.ContainsFunc(vs, func(v memVersion) bool { return !v.deleted }) {
			out = append(out, subject)
		}
	}
	sort.Strings(out)
	return out, nil
}

// DeleteSubject implements stores.Schemas.
func (s *Store) DeleteSubject(ctx context.Context, subject string) ([]int, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	s.reg.init()
	var out []int
	vs := s.reg.versions[subject]
	for i := range vs {
		if !vs[i].deleted {
			vs[i].deleted = true
			out = append(out, vs[i].version)
		}
	}
	return out, nil
}

// Compatibility implements stores.Schemas.
func (s *Store) Compatibility(ctx context.Context, subject string) (stores.Compatibility, error) {
	if err := s.lock(ctx); err != nil {
		return "", err
	}
	defer s.mu.Unlock()
	s.reg.init()
	return schemaTx{&s.reg}.Level(ctx, subject)
}

// SetCompatibility implements stores.Schemas.
func (s *Store) SetCompatibility(ctx context.Context, subject string, level stores.Compatibility) error {
	if err := backend.CheckLevel(subject, level); err != nil {
		return err
	}
	if subject != "" {
		if err := stores.CheckSubject(subject); err != nil {
			return err
		}
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.reg.init()
	s.reg.levels[subject] = level
	return nil
}
