-- 0006_audit_key: reading one key's audit log (ListAudit, claimd inspect,
-- the on-call page), and the claimant's payload hash on a claim's row, as
-- the PostgreSQL tier keeps it.
--
-- audit_log_key is the narrowest index that answers ListAudit from one
-- range of the index in its order: the key's identity, then at. The rowid
-- (id), which orders the entries of one instant, is part of every SQLite
-- index entry already. Until now only audit_log_at could help, so reading a
-- key scanned the whole log.
--
-- Its write cost: every audit row (each claim, and each transition, renew
-- and release that changed a record) inserts one more index entry in the
-- write transaction, where the key sorts rather than at the end as
-- audit_log_at's do: about the size of the key's text (namespace, provider,
-- key) plus 16 bytes per row, and a few more pages dirtied per commit.
-- Creating it reads the whole log once, under the write lock.
CREATE INDEX audit_log_key ON audit_log (namespace, provider, key, at);

-- payload_sha256: the claimant's payload hash, for claims that sent one.
-- Rows written before this migration have none (NULL), which is what they
-- recorded.
ALTER TABLE audit_log ADD COLUMN payload_sha256 BLOB;
