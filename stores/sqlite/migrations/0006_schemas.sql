-- acemq-flow schema registry (SQLite). Times are unix milliseconds.
-- Nothing here is ever deleted: an id read from any message ever written
-- must still resolve, so a subject is soft-deleted (deleted_at) and the
-- purge leaves these tables alone.
--
-- acemq_schemas: one row per canonical schema. AUTOINCREMENT: an id is
-- never given twice, even if a row were removed by hand. fingerprint is the
-- SHA-256 of the schema type and canonical form; canonical is the form the
-- id is taken from (Avro Parsing Canonical Form, or canonical JSON), schema
-- the text served for the id.
CREATE TABLE IF NOT EXISTS acemq_schemas (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint   TEXT    NOT NULL UNIQUE,
    schema_type   TEXT    NOT NULL,
    canonical     TEXT    NOT NULL,
    schema        TEXT    NOT NULL,
    registered_at INTEGER NOT NULL
);

-- acemq_schema_versions: the versions of each subject, numbered from 1 in
-- the order registered and never renumbered; a live subject holds a schema
-- once.
CREATE TABLE IF NOT EXISTS acemq_schema_versions (
    subject       TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    schema_id     INTEGER NOT NULL REFERENCES acemq_schemas (id),
    registered_at INTEGER NOT NULL,
    deleted_at    INTEGER,
    PRIMARY KEY (subject, version)
);
CREATE UNIQUE INDEX IF NOT EXISTS acemq_schema_versions_live ON acemq_schema_versions (subject, schema_id) WHERE deleted_at IS NULL;

-- acemq_schema_config: a subject's compatibility level; subject '' is the
-- registry's default for subjects with none (BACKWARD without a row).
CREATE TABLE IF NOT EXISTS acemq_schema_config (
    subject       TEXT NOT NULL PRIMARY KEY,
    compatibility TEXT NOT NULL
);

INSERT OR IGNORE INTO acemq_migrations (version, name) VALUES (6, '0006_schemas.sql');
