-- acemq-flow transactional outbox (SQLite): the writer's trace context.
-- traceparent is the W3C traceparent of the span the record was written in
-- (Outbox.Add records the caller's context), or NULL: the relay's publish
-- of the record is that span's child, so a trace goes on from the writer's
-- transaction to the consumers of the message.
ALTER TABLE acemq_outbox ADD COLUMN traceparent TEXT;

INSERT OR IGNORE INTO acemq_migrations (version, name) VALUES (8, '0008_outbox_traceparent.sql');
