-- Which of these files have been applied. Each file records itself last, so
-- applying the printed files with any tool leaves the store ready.
CREATE TABLE IF NOT EXISTS acemq_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
);

INSERT OR IGNORE INTO acemq_migrations (version, name) VALUES (0, '0000_migrations.sql');
