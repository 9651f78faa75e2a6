-- entity_settle advances an entity by the settle of the record of key $5,
-- in the settle's transaction, under the entity's lock: the entity moves to
-- the state the record's event leads to, counts one more applied event,
-- records it, is freed, and the event's deferral row (if any) is marked
-- applied. It is fenced: it writes only while the entity is held by key $5
-- with token $6, which is the record's token; no row returned means the
-- holder changed (the lease ran out and another event took the entity).
--
-- $1 namespace, $2 provider, $3 lifecycle, $4 entity id, $5 key, $6 token,
-- $7 now, $8 the entity's state before (read under the lock).
WITH c AS (
    SELECT entity_to, event_type, token, window_expires_at FROM claims
    WHERE namespace = $1 AND provider = $2 AND key = $5
),
e AS (
    UPDATE entities AS n SET
        state      = c.entity_to,
        version    = n.version + 1,
        updated_at = $7,
        busy_key   = '',
        busy_token = 0,
        expires_at = greatest(n.expires_at, c.window_expires_at)
    FROM c
    WHERE n.namespace = $1 AND n.provider = $2 AND n.lifecycle = $3 AND n.entity_id = $4
      AND n.busy_key = $5 AND n.busy_token = $6 AND c.token = $6
    RETURNING n.version, n.state, c.event_type
),
v AS (
    INSERT INTO entity_events (namespace, provider, lifecycle, entity_id, version, event_type, key,
                               from_state, to_state, token, applied_at)
    SELECT $1, $2, $3, $4, e.version, e.event_type, $5, $8, e.state, $6, $7
    FROM e
),
d AS (
    UPDATE deferrals SET applied = true
    WHERE namespace = $1 AND provider = $2 AND key = $5 AND EXISTS (SELECT 1 FROM e)
)
SELECT version FROM e
