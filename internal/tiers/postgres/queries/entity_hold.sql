-- entity_hold marks the locked entity held by the claim that just acquired
-- key $5 with token $6.
--
-- $1 namespace, $2 provider, $3 lifecycle, $4 entity id.
UPDATE entities SET busy_key = $5, busy_token = $6, acquired = true
WHERE namespace = $1 AND provider = $2 AND lifecycle = $3 AND entity_id = $4
