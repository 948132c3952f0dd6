-- acemq-flow saga instances (SQLite). Times are unix milliseconds.
-- One row per instance, keyed by the id of the message that started it: the
-- primary key is what makes two racing creators agree on one instance, and
-- version is the optimistic check every write of the runtime presents.
-- steps is a JSON array, one object per step of the saga in order:
-- {"name","state","attempts","output" (base64),"completed_at",
-- "compensated_at","error"}.
CREATE TABLE IF NOT EXISTS acemq_sagas (
    id             TEXT    PRIMARY KEY,
    saga           TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    step           INTEGER NOT NULL DEFAULT 0,
    input          BLOB    NOT NULL,
    reply_to       TEXT    NOT NULL DEFAULT '',
    correlation_id TEXT    NOT NULL DEFAULT '',
    steps          TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(steps)),
    version        INTEGER NOT NULL,
    started_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    ended_at       INTEGER
);

-- sagas list --saga S --state X, oldest first; sagas unresolved.
CREATE INDEX IF NOT EXISTS acemq_sagas_by_state ON acemq_sagas (saga, state, started_at);
CREATE INDEX IF NOT EXISTS acemq_sagas_state ON acemq_sagas (state, started_at);

-- What the purge deletes: ended instances, oldest first.
CREATE INDEX IF NOT EXISTS acemq_sagas_ended ON acemq_sagas (ended_at) WHERE ended_at IS NOT NULL;

INSERT OR IGNORE INTO acemq_migrations (version, name) VALUES (4, '0004_sagas.sql');
