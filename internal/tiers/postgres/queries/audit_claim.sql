-- audit_claim records a claim that wrote no record (DUPLICATE, IN_PROGRESS,
-- PAYLOAD_MISMATCH, or the repeated ACQUIRED of an attempt): the record that
-- decided it, and who asked.
--
-- $1 at, $2 namespace, $3 provider, $4 key, $5 outcome, $6 reason (0: none),
-- $7 state, $8 token, $9 version, $10 holder, $11 attempt_id, $12 payload hash,
-- $13 principal, $14 transport (tiers.Actor).
INSERT INTO audit_log (at, namespace, provider, key, op, outcome, reason,
                       state, token, version, holder, attempt_id, payload_sha256, principal, transport)
VALUES ($1, $2, $3, $4, 'claim', $5, nullif($6::smallint, 0),
        $7, $8, $9, $10, $11, $12::bytea, $13, $14)
