package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
	"github.com/acemq/acemq-flow/stores/schemacompat"
)

var _ stores.Schemas = (*Store)(nil)

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const versionColumns = `v.subject, v.version, s.id, s.schema_type, s.schema, s.canonical, v.registered_at, v.deleted_at IS NOT NULL`

func scanVersions(rows pgx.Rows, err error) ([]stores.SchemaVersion, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (stores.SchemaVersion, error) {
		var v stores.SchemaVersion
		err := row.Scan(&v.Subject, &v.Version, &v.ID, &v.Type, &v.Text, &v.Canonical, &v.RegisteredAt, &v.Deleted)
		return v, err
	})
}

func versionsOf(ctx context.Context, q querier, subject string, deleted bool) ([]stores.SchemaVersion, error) {
	return scanVersions(q.Query(ctx, `SELECT `+versionColumns+`
FROM acemq_schema_versions AS v JOIN acemq_schemas AS s ON s.id = v.schema_id
WHERE v.subject = $1 AND ($2 OR v.deleted_at IS NULL) ORDER BY v.version`, subject, deleted))
}

func levelOf(ctx context.Context, q querier, subject string) (stores.Compatibility, error) {
	var own, registry *string
	err := q.QueryRow(ctx, `SELECT (SELECT compatibility FROM acemq_schema_config WHERE subject = $1),
(SELECT compatibility FROM acemq_schema_config WHERE subject = '')`, subject).Scan(&own, &registry)
	if err != nil {
		return "", err
	}
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	return backend.EffectiveLevel(deref(own), deref(registry)), nil
}

// schemaTx is backend.SchemaTx in a transaction holding the subject's
// advisory lock: registrations in one subject, on any replica, run one
// after another; in different subjects they race only on a schema's row,
// which its unique fingerprint settles.
type schemaTx struct{ tx pgx.Tx }

func (t schemaTx) LiveVersions(ctx context.Context, subject string) ([]stores.SchemaVersion, error) {
	return versionsOf(ctx, t.tx, subject, false)
}

func (t schemaTx) Level(ctx context.Context, subject string) (stores.Compatibility, error) {
	return levelOf(ctx, t.tx, subject)
}

func (t schemaTx) SchemaID(ctx context.Context, fp string) (int, bool, error) {
	var id int
	err := t.tx.QueryRow(ctx, `SELECT id FROM acemq_schemas WHERE fingerprint = $1`, fp).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, err
}

func (t schemaTx) InsertSchema(ctx context.Context, p *schemacompat.Parsed, now time.Time) (int, error) {
	var id int
	err := t.tx.QueryRow(ctx, `INSERT INTO acemq_schemas (fingerprint, schema_type, canonical, schema, registered_at)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT (fingerprint) DO NOTHING RETURNING id`, p.Fingerprint(), string(p.Type), p.Canonical, p.Text, now).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		// A registration in another subject inserted it first and has
		// committed (ON CONFLICT waited for it): its id is the schema's.
		id, _, err = t.SchemaID(ctx, p.Fingerprint())
	}
	return id, err
}

func (t schemaTx) MaxVersion(ctx context.Context, subject string) (int, error) {
	var top int
	err := t.tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM acemq_schema_versions WHERE subject = $1`, subject).Scan(&top)
	return top, err
}

func (t schemaTx) InsertVersion(ctx context.Context, subject string, version, id int, now time.Time) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO acemq_schema_versions (subject, version, schema_id, registered_at) VALUES ($1, $2, $3, $4)`,
		subject, version, id, now)
	return err
}

// lockSubject takes the transaction-scoped advisory lock of subject.
func lockSubject(ctx context.Context, tx pgx.Tx, subject string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.acemq_schema_versions'), hashtext($1))`, subject)
	return err
}

// RegisterSchema implements stores.Schemas in one transaction under the
// subject's advisory lock.
func (s *Store) RegisterSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error) {
	p, err := backend.PrepareSchema(subject, typ, text)
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	var (
		v       stores.SchemaVersion
		created bool
	)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockSubject(ctx, tx, subject); err != nil {
			return err
		}
		var err error
		v, created, err = backend.RegisterSchema(ctx, schemaTx{tx}, subject, p, s.opts.Now().Truncate(time.Microsecond))
		return err
	})
	var ie *stores.IncompatibleSchemaError
	switch {
	case errors.As(err, &ie):
		return stores.SchemaVersion{}, false, ie
	case err != nil:
		return stores.SchemaVersion{}, false, fmt.Errorf("subject %q: register schema: %w", subject, err)
	}
	return v, created, nil
}

// LookupSchema implements stores.Schemas.
func (s *Store) LookupSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error) {
	p, err := backend.PrepareSchema(subject, typ, text)
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	vs, err := scanVersions(s.pool.Query(ctx, `SELECT `+versionColumns+`
FROM acemq_schema_versions AS v JOIN acemq_schemas AS s ON s.id = v.schema_id
WHERE v.subject = $1 AND v.deleted_at IS NULL AND s.fingerprint = $2`, subject, p.Fingerprint()))
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
	err := s.pool.QueryRow(ctx, `SELECT schema_type, schema, canonical FROM acemq_schemas WHERE id = $1`, id).Scan(&sc.Type, &sc.Text, &sc.Canonical)
	if errors.Is(err, pgx.ErrNoRows) {
		return stores.Schema{}, false, nil
	}
	if err != nil {
		return stores.Schema{}, false, fmt.Errorf("schema id %d: %w", id, err)
	}
	return sc, true, nil
}

// SchemaVersion implements stores.Schemas.
func (s *Store) SchemaVersion(ctx context.Context, subject string, version int) (stores.SchemaVersion, bool, error) {
	vs, err := scanVersions(s.pool.Query(ctx, `SELECT `+versionColumns+`
FROM acemq_schema_versions AS v JOIN acemq_schemas AS s ON s.id = v.schema_id
WHERE v.subject = $1 AND v.deleted_at IS NULL AND (v.version = $2 OR $2 = -1) ORDER BY v.version DESC LIMIT 1`, subject, version))
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
	vs, err := versionsOf(ctx, s.pool, subject, deleted)
	if err != nil {
		return nil, fmt.Errorf("subject %q: read versions: %w", subject, err)
	}
	return vs, nil
}

// Subjects implements stores.Schemas.
func (s *Store) Subjects(ctx context.Context, deleted bool) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT subject FROM acemq_schema_versions WHERE $1 OR deleted_at IS NULL ORDER BY subject`, deleted)
	if err != nil {
		return nil, fmt.Errorf("list schema subjects: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list schema subjects: %w", err)
	}
	return out, nil
}

// DeleteSubject implements stores.Schemas.
func (s *Store) DeleteSubject(ctx context.Context, subject string) ([]int, error) {
	var out []int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockSubject(ctx, tx, subject); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `UPDATE acemq_schema_versions SET deleted_at = $2 WHERE subject = $1 AND deleted_at IS NULL RETURNING version`,
			subject, s.opts.Now())
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[int])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("subject %q: soft-delete: %w", subject, err)
	}
	slices.Sort(out)
	return out, nil
}

// Compatibility implements stores.Schemas.
func (s *Store) Compatibility(ctx context.Context, subject string) (stores.Compatibility, error) {
	l, err := levelOf(ctx, s.pool, subject)
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
	_, err := s.pool.Exec(ctx, `INSERT INTO acemq_schema_config (subject, compatibility) VALUES ($1, $2)
ON CONFLICT (subject) DO UPDATE SET compatibility = excluded.compatibility`, subject, string(level))
	if err != nil {
		return fmt.Errorf("subject %q: set compatibility level: %w", subject, err)
	}
	return nil
}
