-- acemq-flow transactional outbox (PostgreSQL).
-- A writer inserts exchange, routing_key, body, content_type and properties
-- in its own transaction; the relay owns every other column.
CREATE TABLE IF NOT EXISTS acemq_outbox (
    id           bigserial   PRIMARY KEY,
    exchange     text        NOT NULL DEFAULT '',
    routing_key  text        NOT NULL DEFAULT '',
    body         bytea       NOT NULL,
    content_type text        NOT NULL DEFAULT '',
    properties   jsonb       NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    lease_owner  text,
    lease_until  timestamptz,
    published_at timestamptz,
    stuck_at     timestamptz
);

-- What the relay scans: rows neither published nor stuck, oldest first.
CREATE INDEX IF NOT EXISTS acemq_outbox_pending ON acemq_outbox (id)
    WHERE published_at IS NULL AND stuck_at IS NULL;

CREATE INDEX IF NOT EXISTS acemq_outbox_stuck ON acemq_outbox (id)
    WHERE stuck_at IS NOT NULL AND published_at IS NULL;

INSERT INTO acemq_migrations (version, name) VALUES (2, '0002_outbox.sql') ON CONFLICT DO NOTHING;
