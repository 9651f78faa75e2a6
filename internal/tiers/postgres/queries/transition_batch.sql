-- transition_batch is transition.sql for a batch of transitions of distinct
-- keys in one statement (writebatch.go): row i of the arrays is call i's
-- arguments, and each row it answers carries its ordinal. A call whose row
-- is not answered matched nothing, and its caller explains the miss from
-- the current row, as after transition.sql.
--
-- $1 namespaces, $2 providers, $3 keys, $4 nows, $5 target states,
-- $6 whether to store the result (terminal targets), $7 results, $8 new
-- lease ends or NULL, $9 tokens, $10 the states each target may be reached
-- from as a bit mask (bit s set: from state s allowed; tiers.AllowedFrom),
-- $11 the hashes of the lease secrets presented (32 bytes each), $12
-- whether each result came from an earlier holder's effect fence, $13
-- principals and $14 transports: who asked (tiers.Actor) (all three audited
-- only).
--
-- The WHERE clause is transition.sql's, without the entity lock: a terminal
-- transition of a record that carries an entity event matches nothing here
-- and takes the entity's path (entity.go), as it does there.
--
-- Each row reads claims by its primary key, in the order of the arrays
-- (sorted by key: one lock order for every batch). The batch runs with hash
-- joins, merge joins and sequential scans off (transitionBatchPlan): on a
-- claims table the planner believes empty or tiny, a cached generic plan
-- would otherwise hash, or scan once per row, the whole table for every
-- batch long after it filled.
WITH i AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::smallint[], $6::boolean[],
                         $7::bytea[], $8::timestamptz[], $9::bigint[], $10::integer[], $11::bytea[], $12::boolean[],
                         $13::text[], $14::text[])
        WITH ORDINALITY AS t(in_namespace, in_provider, in_key, in_now, in_to, in_store_result,
                             in_result, in_lease, in_token, in_from, in_secret_hash, in_effect_recovered,
                             in_principal, in_transport, in_ord)
),
u AS (
    UPDATE claims SET
        state            = i.in_to,
        version          = version + 1,
        updated_at       = i.in_now,
        result           = CASE WHEN i.in_store_result THEN i.in_result ELSE result END,
        lease_expires_at = coalesce(i.in_lease, lease_expires_at)
    FROM i
    WHERE namespace = i.in_namespace AND provider = i.in_provider AND key = i.in_key
      AND token = i.in_token AND secret_hash = i.in_secret_hash AND NOT released
      AND (i.in_from >> state) & 1 = 1
      AND (lifecycle = '' OR NOT i.in_store_result)
    RETURNING i.in_ord, i.in_now, i.in_effect_recovered, i.in_principal, i.in_transport, namespace, provider, key, {RECORD}
),
a AS (
    INSERT INTO audit_log (at, namespace, provider, key, op, state, token, version, holder, attempt_id, effect_recovered,
                           principal, transport)
    SELECT u.in_now, u.namespace, u.provider, u.key, 'transition', u.state, u.token, u.version, u.holder, u.attempt_id,
           u.in_effect_recovered, u.in_principal, u.in_transport
    FROM u
)
SELECT in_ord, {RECORD} FROM u
