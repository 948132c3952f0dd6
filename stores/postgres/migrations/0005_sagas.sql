-- acemq-flow saga instances (PostgreSQL).
-- One row per instance, keyed by the id of the message that started it: the
-- primary key is what makes two racing creators agree on one instance, and
-- version is the optimistic check every write of the runtime presents.
-- steps is a JSON array, one object per step of the saga in order:
-- {"name","state","attempts","output" (base64),"completed_at",
-- "compensated_at","error"}.
CREATE TABLE IF NOT EXISTS acemq_sagas (
    id             text        PRIMARY KEY,
    saga           text        NOT NULL,
    state          text        NOT NULL,
    step           integer     NOT NULL DEFAULT 0,
    input          bytea       NOT NULL,
    reply_to       text        NOT NULL DEFAULT '',
    correlation_id text        NOT NULL DEFAULT '',
    steps          jsonb       NOT NULL DEFAULT '[]',
    version        bigint      NOT NULL,
    started_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    ended_at       timestamptz
);

-- sagas list --saga S --state X, oldest first; sagas unresolved.
CREATE INDEX IF NOT EXISTS acemq_sagas_by_state ON acemq_sagas (saga, state, started_at);
CREATE INDEX IF NOT EXISTS acemq_sagas_state ON acemq_sagas (state, started_at);

-- What the purge deletes: ended instances, oldest first.
CREATE INDEX IF NOT EXISTS acemq_sagas_ended ON acemq_sagas (ended_at) WHERE ended_at IS NOT NULL;

INSERT INTO acemq_migrations (version, name) VALUES (5, '0005_sagas.sql') ON CONFLICT DO NOTHING;
