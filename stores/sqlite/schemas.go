package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
	"github.com/acemq/acemq-flow/stores/schemacompat"
)

var _ stores.Schemas = (*Store)(nil)

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

const versionColumns = `v.subject, v.version, s.id, s.schema_type, s.schema, s.canonical, v.registered_at, v.deleted_at IS NOT NULL`

func scanVersions(rows *sql.Rows, err error) ([]stores.SchemaVersion, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []stores.SchemaVersion
	for rows.Next() {
		var v stores.SchemaVersion
		var at int64
		if err := rows.Scan(&v.Subject, &v.Version, &v.ID, &v.Type, &v.Text, &v.Canonical, &at, &v.Deleted); err != nil {
			return nil, err
		}
		v.RegisteredAt = time.UnixMilli(at)
		out = append(out, v)
	}
	return out, rows.Err()
}

func versionsOf(ctx context.Context, q querier, subject string, deleted bool) ([]stores.SchemaVersion, error) {
	return scanVersions(q.QueryContext(ctx, `SELECT `+versionColumns+`
FROM acemq_schema_versions AS v JOIN acemq_schemas AS s ON s.id = v.schema_id
WHERE v.subject = ?1 AND (?2 OR v.deleted_at IS NULL) ORDER BY v.version`, subject, deleted))
}

func levelOf(ctx context.Context, q querier, subject string) (stores.Compatibility, error) {
	var own, registry sql.NullString
	err := q.QueryRowContext(ctx, `SELECT (SELECT compatibility FROM acemq_schema_config WHERE subject = ?1),
(SELECT compatibility FROM acemq_schema_config WHERE subject = '')`, subject).Scan(&own, &registry)
	if err != nil {
		return "", err
	}
	return backend.EffectiveLevel(own.String, registry.String), nil
}

// schemaTx is backend.SchemaTx in one IMMEDIATE transaction, which holds
// the file's write lock: registrations never interleave.
type schemaTx struct{ tx *sql.Tx }

func (t schemaTx) LiveVersions(ctx context.Context, subject string) ([]stores.SchemaVersion, error) {
	return versionsOf(ctx, t.tx, subject, false)
}

func (t schemaTx) Level(ctx context.Context, subject string) (stores.Compatibility, error) {
	return levelOf(ctx, t.tx, subject)
}

func (t schemaTx) SchemaID(ctx context.Context, fp string) (int, bool, error) {
	var id int
	err := t.tx.QueryRowContext(ctx, `SELECT id FROM acemq_schemas WHERE fingerprint = ?1`, fp).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, err
}

func (t schemaTx) InsertSchema(ctx context.Context, p *schemacompat.Parsed, now time.Time) (int, error) {
	var id int
	err := t.tx.QueryRowContext(ctx, `INSERT INTO acemq_schemas (fingerprint, schema_type, canonical, schema, registered_at)
VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id`, p.Fingerprint(), string(p.Type), p.Canonical, p.Text, now.UnixMilli()).Scan(&id)
	return id, err
}

func (t schemaTx) MaxVersion(ctx context.Context, subject string) (int, error) {
	var top int
	err := t.tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM acemq_schema_versions WHERE subject = ?1`, subject).Scan(&top)
	return top, err
}

func (t schemaTx) InsertVersion(ctx context.Context, subject string, version, id int, now time.Time) error {
	_, err := t.tx.ExecContext(ctx, `INSERT INTO acemq_schema_versions (subject, version, schema_id, registered_at) VALUES (?1, ?2, ?3, ?4)`,
		subject, version, id, now.UnixMilli())
	return err
}

// RegisterSchema implements stores.Schemas in one IMMEDIATE transaction.
func (s *Store) RegisterSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error) {
	p, err := backend.PrepareSchema(subject, typ, text)
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	var (
		v       stores.SchemaVersion
		created bool
	)
	err = s.inTx(ctx, fmt.Sprintf("subject %q: register schema", subject), func(tx *sql.Tx) error {
		var err error
		v, created, err = backend.RegisterSchema(ctx, schemaTx{tx}, subject, p, s.opts.Now().Truncate(time.Millisecond))
		return err
	})
	if err != nil {
		// The answers about the schema are returned as they are.
		var ie *stores.IncompatibleSchemaError
		if errors.As(err, &ie) {
			return stores.SchemaVersion{}, false, ie
		}
		return stores.SchemaVersion{}, false, err
	}
	return v, created, nil
}

// LookupSchema implements stores.Schemas.
func (s *Store) LookupSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error) {
	p, err := backend.PrepareSchema(subject, typ, text)
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	vs, err := scanVersions(s.db.QueryContext(ctx, `SELECT `+versionColumns+`
FROM acemq_schema_versions AS v JOIN acemq_schemas AS s ON s.id = v.schema_id
WHERE v.subject = ?1 AND v.deleted_at IS NULL AND s.fingerprint = ?2`, subject, p.Fingerprint()))
	if err != nil {
		return stores.SchemaVersion{}, false, fmt.Errorf("subject %q: look up schema: %w", subject, err)
	}
	if len(vs) == 0 {
		return stores.SchemaVersion{}, false, nil
	}
	return vs[0], true, nil
}

// SchemaByID implements stores.Schemas.
func (s *Store) SchemaByID(ctx context.Context, id int) (stores.Schema, bool, error) {
	sc := stores.Schema{ID: id}
	err := s.db.QueryRowContext(ctx, `SELECT schema_type, schema, canonical FROM acemq_schemas WHERE id = ?1`, id).Scan(&sc.Type, &sc.Text, &sc.Canonical)
	if errors.Is(err, sql.ErrNoRows) {
		return stores.Schema{}, false, nil
	}
	if err != nil {
		return stores.Schema{}, false, fmt.Errorf("schema id %d: %w", id, err)
	}
	return sc, true, nil
}

// SchemaVersion implements stores.Schemas.
func (s *Store) SchemaVersion(ctx context.Context, subject string, version int) (stores.SchemaVersion, bool, error) {
	vs, err := scanVersions(s.db.QueryContext(ctx, `SELECT `+versionColumns+`
FROM acemq_schema_versions AS v JOIN acemq_schemas AS s ON s.id = v.schema_id
WHERE v.subject = ?1 AND v.deleted_at IS NULL AND (v.version = ?2 OR ?2 = -1) ORDER BY v.version DESC LIMIT 1`, subject, version))
	if err != nil {
		return stores.SchemaVersion{}, false, fmt.Errorf("subject %q: read version %d: %w", subject, version, err)
	}
	if len(vs) == 0 {
		return stores.SchemaVersion{}, false, nil
	}
	return vs[0], true, nil
}

// SubjectVersions implements stores.Schemas.
func (s *Store) SubjectVersions(ctx context.Context, subject string, deleted bool) ([]stores.SchemaVersion, error) {
	vs, err := versionsOf(ctx, s.db, subject, deleted)
	if err != nil {
		return nil, fmt.Errorf("subject %q: read versions: %w", subject, err)
	}
	return vs, nil
}

// Subjects implements stores.Schemas.
func (s *Store) Subjects(ctx context.Context, deleted bool) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT subject FROM acemq_schema_versions WHERE ?1 OR deleted_at IS NULL ORDER BY subject`, deleted)
	if err != nil {
		return nil, fmt.Errorf("list schema subjects: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var subject string
		if err := rows.Scan(&subject); err != nil {
			return nil, fmt.Errorf("list schema subjects: %w", err)
		}
		out = append(out, subject)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list schema subjects: %w", err)
	}
	return out, nil
}

// DeleteSubject implements stores.Schemas.
func (s *Store) DeleteSubject(ctx context.Context, subject string) ([]int, error) {
	var out []int
	err := s.inTx(ctx, fmt.Sprintf("subject %q: soft-delete", subject), func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `UPDATE acemq_schema_versions SET deleted_at = ?2 WHERE subject = ?1 AND deleted_at IS NULL RETURNING version`,
			subject, s.opts.Now().UnixMilli())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// Compatibility implements stores.Schemas.
func (s *Store) Compatibility(ctx context.Context, subject string) (stores.Compatibility, error) {
	l, err := levelOf(ctx, s.db, subject)
	if err != nil {
		return "", fmt.Errorf("subject %q: read compatibility level: %w", subject, err)
	}
	return l, nil
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
	return s.inTx(ctx, fmt.Sprintf("subject %q: set compatibility level", subject), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO acemq_schema_config (subject, compatibility) VALUES (?1, ?2)
ON CONFLICT (subject) DO UPDATE SET compatibility = excluded.compatibility`, subject, string(level))
		return err
	})
}
