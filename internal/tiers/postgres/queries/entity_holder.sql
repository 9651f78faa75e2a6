-- entity_holder reads what decides whether the claim holding an entity
-- still holds it: its record's token, released flag, state and lease, and
-- its event type (EntityPosition.BusyWith).
--
-- $1 namespace, $2 provider, $3 the holding key.
SELECT token, released, state, lease_expires_at, event_type FROM claims
WHERE namespace = $1 AND provider = $2 AND key = $3
