-- acemq-flow claim-check blobs (PostgreSQL), for `--blobs postgres://…`.
-- One row per payload, keyed by "sha256:" and the hex SHA-256 of content
-- (FLOW-FORMAT §6): the same payload is one row however many messages
-- reference it. stored_at is the time of the last put of that content
-- (a repeated put moves it forward), which is what the purge measures a
-- blob's age from; size is content's length, read without the content.
-- An operator reads a payload with
--   SELECT content FROM acemq_blobs WHERE key = 'sha256:…';
CREATE TABLE IF NOT EXISTS acemq_blobs (
    key       text        PRIMARY KEY,
    size      bigint      NOT NULL,
    content   bytea       NOT NULL,
    stored_at timestamptz NOT NULL
);

-- What the purge deletes: the blobs last put before the cut-off.
CREATE INDEX IF NOT EXISTS acemq_blobs_stored ON acemq_blobs (stored_at);

INSERT INTO acemq_migrations (version, name) VALUES (8, '0008_blobs.sql') ON CONFLICT DO NOTHING;
