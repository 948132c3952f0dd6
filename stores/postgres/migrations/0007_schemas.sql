-- acemq-flow schema registry (PostgreSQL).
-- Nothing here is ever deleted: an id read from any message ever written
-- must still resolve, so a subject is soft-deleted (deleted_at) and the
-- purge leaves these tables alone.
--
-- acemq_schemas: one row per canonical schema. The id is an identity of 4
-- bytes, the size of the Confluent wire framing's id; a sequence never
-- gives a value twice (a registration that loses a race may leave a gap,
-- never a reuse). fingerprint is the SHA-256 of the schema type and
-- canonical form; canonical is the form the id is taken from (Avro Parsing
-- Canonical Form, or canonical JSON), schema the text served for the id.
CREATE TABLE IF NOT EXISTS acemq_schemas (
    id            integer     GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fingerprint   text        NOT NULL UNIQUE,
    schema_type   text        NOT NULL,
    canonical     text        NOT NULL,
    schema        text        NOT NULL,
    registered_at timestamptz NOT NULL
);

-- acemq_schema_versions: the versions of each subject, numbered from 1 in
-- the order registered and never renumbered (registrations in one subject
-- take a transaction-scoped advisory lock on it); a live subject holds a
-- schema once.
CREATE TABLE IF NOT EXISTS acemq_schema_versions (
    subject       text        NOT NULL,
    version       integer     NOT NULL,
    schema_id     integer     NOT NULL REFERENCES acemq_schemas (id),
    registered_at timestamptz NOT NULL,
    deleted_at    timestamptz,
    PRIMARY KEY (subject, version)
);
CREATE UNIQUE INDEX IF NOT EXISTS acemq_schema_versions_live ON acemq_schema_versions (subject, schema_id) WHERE deleted_at IS NULL;

-- acemq_schema_config: a subject's compatibility level; subject '' is the
-- registry's default for subjects with none (BACKWARD without a row).
CREATE TABLE IF NOT EXISTS acemq_schema_config (
    subject       text NOT NULL PRIMARY KEY,
    compatibility text NOT NULL
);

INSERT INTO acemq_migrations (version, name) VALUES (7, '0007_schemas.sql') ON CONFLICT DO NOTHING;
