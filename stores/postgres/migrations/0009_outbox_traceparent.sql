-- acemq-flow transactional outbox (PostgreSQL): the writer's trace context.
-- traceparent is the W3C traceparent of the span the record was written in
-- (Outbox.Add records the caller's context), or NULL: the relay's publish
-- of the record is that span's child, so a trace goes on from the writer's
-- transaction to the consumers of the message. A nullable column without a
-- default: adding it rewrites no row.
ALTER TABLE acemq_outbox ADD COLUMN IF NOT EXISTS traceparent text;

INSERT INTO acemq_migrations (version, name) VALUES (9, '0009_outbox_traceparent.sql') ON CONFLICT DO NOTHING;
