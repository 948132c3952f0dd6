-- acemq-flow transactional outbox (SQLite): records delivered later. Times
-- are unix milliseconds.
-- deliver_at, set by the writer, is when the message is due at its
-- exchange: a row whose deliver_at is still ahead when the relay takes it
-- is published into the delay ladder (FLOW-FORMAT §4) addressed to its
-- exchange and routing key, and delivered when due by the runtime that
-- consumes acemq.schedule.due. NULL, or a time already passed, publishes
-- it straight to its exchange.
ALTER TABLE acemq_outbox ADD COLUMN deliver_at INTEGER;

INSERT OR IGNORE INTO acemq_migrations (version, name) VALUES (5, '0005_outbox_deliver_at.sql');
