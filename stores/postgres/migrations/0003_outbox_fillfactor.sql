-- acemq-flow transactional outbox (PostgreSQL): room on every page.
-- The relay writes each row twice: its lease (lease_owner, lease_until),
-- then its mark (published_at). With half of each page kept free, the lease
-- is a HOT update: the new row version stays on its page and no index entry
-- is written, which roughly halves the database's work per relayed row.
-- Rows inserted from now on leave the room; existing pages keep theirs.
ALTER TABLE acemq_outbox SET (fillfactor = 50);

INSERT INTO acemq_migrations (version, name) VALUES (3, '0003_outbox_fillfactor.sql') ON CONFLICT DO NOTHING;
