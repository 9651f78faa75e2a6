-- entity_get reads an entity and its applied events, oldest first, in one
-- statement (one snapshot). An entity no event was applied to yet comes back
-- as one row whose event columns are NULL.
--
-- $1 namespace, $2 provider, $3 lifecycle, $4 entity id.
SELECT n.state, n.version, n.updated_at, n.busy_key,
       v.event_type, v.key, v.from_state, v.to_state, v.token, v.applied_at
FROM entities n
LEFT JOIN entity_events v USING (namespace, provider, lifecycle, entity_id)
WHERE n.namespace = $1 AND n.provider = $2 AND n.lifecycle = $3 AND n.entity_id = $4
ORDER BY v.version
