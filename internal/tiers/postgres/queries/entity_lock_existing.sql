-- entity_lock_existing locks an entity before the terminal write of a
-- record that holds or held it (the order every entity write keeps: entity,
-- then record) and returns its state and holder. No row: the entity is gone
-- (pruned), nobody holds it.
--
-- $1 namespace, $2 provider, $3 lifecycle, $4 entity id.
SELECT state, busy_key, busy_token FROM entities
WHERE namespace = $1 AND provider = $2 AND lifecycle = $3 AND entity_id = $4
FOR UPDATE
