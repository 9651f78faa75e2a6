-- entity_lock locks the entity of a claim for the rest of the claim's
-- transaction, creating it in its initial state when it was never seen, and
-- returns where it stands. ON CONFLICT DO UPDATE locks the row that exists
-- (the latest committed version, under READ COMMITTED) as SELECT … FOR
-- UPDATE would, in the same round trip; its SET keeps the entity as long as
-- the claim's window lasts.
--
-- $1 namespace, $2 provider, $3 lifecycle, $4 entity id, $5 the initial
-- state, $6 now, $7 the claim's window end (now + ttl).
INSERT INTO entities AS e (namespace, provider, lifecycle, entity_id, state, version, updated_at, expires_at)
VALUES ($1, $2, $3, $4, $5, 0, $6, $7)
ON CONFLICT (namespace, provider, lifecycle, entity_id) DO UPDATE SET
    expires_at = greatest(e.expires_at, excluded.expires_at)
RETURNING state, busy_key, busy_token
