-- renew sets the lease of the current holder to $5, with its audit row.
--
-- $1 namespace, $2 provider, $3 key, $4 now, $5 lease end (now + lease),
-- $6 token, $7 the hash of the lease secret presented, $8 principal,
-- $9 transport: who asked (tiers.Actor), for the audit row only. The WHERE clause is
-- tiers.ApplyRenew's success condition; a lease that ran out may still be
-- renewed while nobody has taken the key over (fencing is by token and
-- secret, not by clock).
WITH u AS (
    UPDATE claims SET
        lease_expires_at = $5,
        version          = version + 1,
        updated_at       = $4
    WHERE namespace = $1 AND provider = $2 AND key = $3
      AND token = $6 AND secret_hash = $7::bytea AND NOT released AND state NOT IN ({SETTLED}, {FAILED})
    RETURNING {RECORD}
),
a AS (
    INSERT INTO audit_log (at, namespace, provider, key, op, state, token, version, holder, attempt_id, principal, transport)
    SELECT $4, $1, $2, $3, 'renew', u.state, u.token, u.version, u.holder, u.attempt_id, $8::text, $9::text
    FROM u
)
SELECT {RECORD} FROM u
