-- claim_batch_seen reads the records of the keys of a batch that
-- claim_batch.sql did not insert, so that their claims are answered
-- (DUPLICATE, IN_PROGRESS, PAYLOAD_MISMATCH, the repeated ACQUIRED of an
-- attempt) without a statement each, as claim.sql's s does for one claim.
-- It runs after the insert has committed, so it sees the rows that made the
-- insert skip a key, and any committed since; a key whose row is gone
-- (pruned meanwhile) is not returned, and its claim runs claim.sql.
--
-- $1 namespaces, $2 providers, $3 keys (one element per key).
--
-- batch.go runs it unprepared (pgx's QueryExecModeCacheDescribe), so it is
-- planned for the table as it is at each run: a plan cached while claims
-- was nearly empty would join by scanning it.
SELECT namespace, provider, key, {RECORD}
FROM unnest($1::text[], $2::text[], $3::text[]) AS i(i_namespace, i_provider, i_key)
JOIN claims ON namespace = i_namespace AND provider = i_provider AND key = i_key
