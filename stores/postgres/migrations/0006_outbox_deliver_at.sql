-- acemq-flow transactional outbox (PostgreSQL): records delivered later.
-- deliver_at, set by the writer, is when the message is due at its
-- exchange: a row whose deliver_at is still ahead when the relay takes it
-- is published into the delay ladder (FLOW-FORMAT §4) addressed to its
-- exchange and routing key, and delivered when due by the runtime that
-- consumes acemq.schedule.due. NULL, or a time already passed, publishes
-- it straight to its exchange. A nullable column without a default: adding
-- it rewrites no row.
ALTER TABLE acemq_outbox ADD COLUMN IF NOT EXISTS deliver_at timestamptz;

INSERT INTO acemq_migrations (version, name) VALUES (6, '0006_outbox_deliver_at.sql') ON CONFLICT DO NOTHING;
