-- entity_forget deletes, under its lock, an entity that no claim ever
-- acquired: the row entity_lock.sql created for a claim that did not
-- proceed (DEFERRED, SUPERSEDED, or the key's own answer). Such an entity
-- is in its initial state, as one never seen is, and GetEntity answers
-- ErrEntityNotFound for both: a deferral alone creates no entity.
--
-- $1 namespace, $2 provider, $3 lifecycle, $4 entity id.
DELETE FROM entities
WHERE namespace = $1 AND provider = $2 AND lifecycle = $3 AND entity_id = $4
  AND NOT acquired
