-- acemq-flow transactional outbox (SQLite). Times are unix milliseconds.
-- A writer inserts exchange, routing_key, body, content_type and properties
-- in its own transaction; the relay owns every other column.
CREATE TABLE IF NOT EXISTS acemq_outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    exchange     TEXT    NOT NULL DEFAULT '',
    routing_key  TEXT    NOT NULL DEFAULT '',
    body         BLOB    NOT NULL,
    content_type TEXT    NOT NULL DEFAULT '',
    properties   TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(properties)),
    created_at   INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    lease_owner  TEXT,
    lease_until  INTEGER,
    published_at INTEGER,
    stuck_at     INTEGER
);

-- What the relay scans: rows neither published nor stuck, oldest first.
CREATE INDEX IF NOT EXISTS acemq_outbox_pending ON acemq_outbox (id)
    WHERE published_at IS NULL AND stuck_at IS NULL;

CREATE INDEX IF NOT EXISTS acemq_outbox_stuck ON acemq_outbox (id)
    WHERE stuck_at IS NOT NULL AND published_at IS NULL;

INSERT OR IGNORE INTO acemq_migrations (version, name) VALUES (2, '0002_outbox.sql');
