-- transition moves a record to $5, fenced by its token, with its audit row.
--
-- $1 namespace, $2 provider, $3 key, $4 now, $5 target state,
-- $6 whether to store $7 as the result (a terminal target), $7 result,
-- $8 the new lease end or NULL to keep it, $9 token,
-- $10 the states the target may be reached from (tiers.AllowedFrom),
-- $11 the hash of the lease secret presented (always 32 bytes: fenced.go
-- sends none other), $12 whether the caller holds the lock of the record's
-- entity, $13 whether the result came from an earlier holder's effect fence
-- (tiers.TransitionParams.EffectRecovered; audited only), $14 principal,
-- $15 transport: who asked (tiers.Actor; audited only).
--
-- A terminal transition of a record that carries an entity event settles or
-- frees its entity in the same transaction (entity.go), which locks the
-- entity before the record, as a claim does, so that the two never wait on
-- each other in opposite orders. Without that lock ($12 false) such a
-- transition matches nothing, and the caller reads the row and takes the
-- entity's path.
--
-- The WHERE clause is tiers.ApplyTransition's success condition: the current
-- token and its owner's secret hash, not released, and an allowed
-- predecessor state. No row means one of them failed (or the key is absent);
-- the caller reads the row and lets ApplyTransition name the error (stale
-- token before not owner before the state), or the no-op repeat, which
-- ApplyTransition grants only to the owner's secret too.
WITH u AS (
    UPDATE claims SET
        state            = $5,
        version          = version + 1,
        updated_at       = $4,
        result           = CASE WHEN $6::boolean THEN $7::bytea ELSE result END,
        lease_expires_at = coalesce($8::timestamptz, lease_expires_at)
    WHERE namespace = $1 AND provider = $2 AND key = $3
      AND token = $9 AND secret_hash = $11::bytea AND NOT released AND state = ANY ($10::smallint[])
      AND (lifecycle = '' OR NOT $6::boolean OR $12::boolean)
    RETURNING {RECORD}
),
a AS (
    INSERT INTO audit_log (at, namespace, provider, key, op, state, token, version, holder, attempt_id, effect_recovered, principal, transport)
    SELECT $4, $1, $2, $3, 'transition', u.state, u.token, u.version, u.holder, u.attempt_id, $13::boolean,
           $14::text, $15::text
    FROM u
)
SELECT {RECORD} FROM u
