-- 0006_audit_actor: who asked for each audited decision. principal is the
-- authenticated caller's name from the auth file ('' for the anonymous
-- caller of a server without authentication); transport is how the call
-- arrived: 'grpc', 'http-rest', 'connect' or 'grpc-web' (tiers.Actor).
--
-- NOT NULL with a constant default adds the columns without rewriting a row
-- (PostgreSQL 11+), and ALTER TABLE on the partitioned audit_log reaches
-- every partition, the ones created later too. Rows written before this
-- migration read '' for both: a transport of '' says the actor was not
-- recorded, which is what they were.
ALTER TABLE audit_log
    ADD COLUMN principal text NOT NULL DEFAULT '',
    ADD COLUMN transport text NOT NULL DEFAULT '';
