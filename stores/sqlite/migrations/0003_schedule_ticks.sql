-- acemq-flow schedule ticks (SQLite). Times are unix milliseconds.
-- One row per tick a runtime fired: the primary key is what makes a tick fire
-- once across replicas, and the firing's outbox record is written in the
-- same transaction as its row.
CREATE TABLE IF NOT EXISTS acemq_schedule_ticks (
    schedule   TEXT    NOT NULL,
    tick       INTEGER NOT NULL,
    claimed_at INTEGER NOT NULL,
    outbox_id  INTEGER,
    PRIMARY KEY (schedule, tick)
);

INSERT OR IGNORE INTO acemq_migrations (version, name) VALUES (3, '0003_schedule_ticks.sql');
