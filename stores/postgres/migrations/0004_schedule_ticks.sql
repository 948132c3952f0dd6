-- acemq-flow schedule ticks (PostgreSQL).
-- One row per tick a runtime fired: the primary key is what makes a tick fire
-- once across replicas, and the firing's outbox record is written in the
-- same transaction as its row.
CREATE TABLE IF NOT EXISTS acemq_schedule_ticks (
    schedule   text        NOT NULL,
    tick       timestamptz NOT NULL,
    claimed_at timestamptz NOT NULL,
    outbox_id  bigint,
    PRIMARY KEY (schedule, tick)
);

INSERT INTO acemq_migrations (version, name) VALUES (4, '0004_schedule_ticks.sql') ON CONFLICT DO NOTHING;
