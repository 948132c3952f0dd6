-- acemq-flow idempotency store (PostgreSQL).
-- One row per key: state 'claimed' while a lease is held (expires_at = end of
-- the lease), 'confirmed' once handled (expires_at = end of the retention).
-- A row whose expires_at has passed counts as absent and may be claimed.
CREATE TABLE IF NOT EXISTS acemq_idempotency (
    key          text        NOT NULL PRIMARY KEY,
    state        text        NOT NULL CHECK (state IN ('claimed', 'confirmed')),
    token        bigint      NOT NULL,
    owner        text        NOT NULL DEFAULT '',
    claimed_at   timestamptz NOT NULL,
    confirmed_at timestamptz,
    expires_at   timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS acemq_idempotency_expires_at ON acemq_idempotency (expires_at);

-- The fencing counter: every claim takes the next value as its token.
CREATE SEQUENCE IF NOT EXISTS acemq_idempotency_token;

INSERT INTO acemq_migrations (version, name) VALUES (1, '0001_idempotency.sql') ON CONFLICT DO NOTHING;
