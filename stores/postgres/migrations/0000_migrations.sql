-- Which of these files have been applied. Each file records itself last, so
-- applying the printed files with any tool leaves the store ready.
CREATE TABLE IF NOT EXISTS acemq_migrations (
    version    integer     NOT NULL PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO acemq_migrations (version, name) VALUES (0, '0000_migrations.sql') ON CONFLICT DO NOTHING;
