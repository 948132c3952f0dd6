-- acemq-flow claim-check blobs (SQLite), for `--blobs sqlite:PATH`.
-- One row per payload, keyed by "sha256:" and the hex SHA-256 of content
-- (FLOW-FORMAT §6): the same payload is one row however many messages
-- reference it. stored_at (unix milliseconds) is the time of the last put
-- of that content (a repeated put moves it forward), which is what the
-- purge measures a blob's age from; size is content's length, read without
-- the content. An operator reads a payload with
--   sqlite3 acemq.db "SELECT writefile('payload', content) FROM acemq_blobs WHERE key = 'sha256:…'"
CREATE TABLE IF NOT EXISTS acemq_blobs (
    key       TEXT    PRIMARY KEY,
    size      INTEGER NOT NULL,
    content   BLOB    NOT NULL,
    stored_at INTEGER NOT NULL
);

-- What the purge deletes: the blobs last put before the cut-off.
CREATE INDEX IF NOT EXISTS acemq_blobs_stored ON acemq_blobs (stored_at);

INSERT OR IGNORE INTO acemq_migrations (version, name) VALUES (7, '0007_blobs.sql');
