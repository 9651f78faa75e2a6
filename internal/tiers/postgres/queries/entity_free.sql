-- entity_free frees an entity held by key $5 with token $6 (its record
-- failed or was released), leaving its state as it is. Held by another,
-- it is left alone.
--
-- $1 namespace, $2 provider, $3 lifecycle, $4 entity id.
UPDATE entities SET busy_key = '', busy_token = 0
WHERE namespace = $1 AND provider = $2 AND lifecycle = $3 AND entity_id = $4
  AND busy_key = $5 AND busy_token = $6
