-- release gives the key back on behalf of the holder of token $5, with its
-- audit row: the next claim acquires it (RELEASED, token + 1).
--
-- $1 namespace, $2 provider, $3 key, $4 now, $5 token, $6 the hash of the
-- lease secret presented, $7 whether the caller holds the lock of the
-- record's entity, $8 principal, $9 transport: who asked (tiers.Actor),
-- for the audit row only. The WHERE clause is tiers.ApplyRelease's success
-- condition; a repeated release matches nothing and the caller answers it
-- from the row as a no-op (for the owner's secret only). A record that
-- carries an entity event is released only under its entity's lock
-- (entity.go, as transition.sql says).
WITH u AS (
    UPDATE claims SET
        released         = true,
        lease_expires_at = $4,
        version          = version + 1,
        updated_at       = $4
    WHERE namespace = $1 AND provider = $2 AND key = $3
      AND token = $5 AND secret_hash = $6::bytea AND NOT released AND state NOT IN ({SETTLED}, {FAILED})
      AND (lifecycle = '' OR $7::boolean)
    RETURNING {RECORD}
),
a AS (
    INSERT INTO audit_log (at, namespace, provider, key, op, state, token, version, holder, attempt_id, principal, transport)
    SELECT $4, $1, $2, $3, 'release', u.state, u.token, u.version, u.holder, u.attempt_id, $8::text, $9::text
    FROM u
)
SELECT {RECORD} FROM u
