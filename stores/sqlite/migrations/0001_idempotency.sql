-- acemq-flow idempotency store (SQLite). Times are unix milliseconds.
-- One row per key: state 'claimed' while a lease is held (expires_at = end of
-- the lease), 'confirmed' once handled (expires_at = end of the retention).
-- A row whose expires_at has passed counts as absent and may be claimed.
CREATE TABLE IF NOT EXISTS acemq_idempotency (
    key          TEXT    NOT NULL PRIMARY KEY,
    state        TEXT    NOT NULL CHECK (state IN ('claimed', 'confirmed')),
    token        INTEGER NOT NULL,
    owner        TEXT    NOT NULL DEFAULT '',
    claimed_at   INTEGER NOT NULL,
    confirmed_at INTEGER,
    expires_at   INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS acemq_idempotency_expires_at ON acemq_idempotency (expires_at);

-- The fencing counter: every claim takes the next value as its token.
CREATE TABLE IF NOT EXISTS acemq_idempotency_token (
    id    INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
);

INSERT OR IGNORE INTO acemq_idempotency_token (id, value) VALUES (1, 0);

INSERT OR IGNORE INTO acemq_migrations (version, name) VALUES (1, '0001_idempotency.sql');
