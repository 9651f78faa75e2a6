-- 0005_audit_actor: who asked for each audited decision. principal is the
-- authenticated caller's name from the auth file ('' for the anonymous
-- caller of a server without authentication); transport is how the call
-- arrived: 'grpc', 'http-rest', 'connect' or 'grpc-web' (tiers.Actor).
-- Rows written before this migration read '' for both: a transport of ''
-- says the actor was not recorded, which is what they were.
ALTER TABLE audit_log ADD COLUMN principal TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN transport TEXT NOT NULL DEFAULT '';
