-- 0007_entity_expiry: entities and deferral rows are pruned as records are,
-- once every window of theirs is over (tiers.EntityPruner), as on
-- PostgreSQL. expires_at (unix microseconds) is the latest dedup window end
-- among an entity's ordered claims, applied events and deferrals, or, for a
-- deferral row, its last delivery's window end.
ALTER TABLE entities ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deferrals ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;

-- Rows written before this migration did not record their window. A
-- deferral row keeps its record's window when the key still has one, and at
-- least 400 days past its last delivery (the longest window claimd opens),
-- so that no row goes before its window ends.
UPDATE deferrals SET expires_at = max(
    last_seen_at + 400 * 86400 * 1000000,
    coalesce((SELECT c.window_expires_at FROM claims c
              WHERE c.namespace = deferrals.namespace AND c.provider = deferrals.provider AND c.key = deferrals.key), 0));

-- An entity lives as long as the latest window of its records that are
-- still stored (a record past its window may already be pruned) and of its
-- deferrals; one with neither has no delivery left to order.
UPDATE entities SET expires_at = max(entities.expires_at, w.until)
FROM (SELECT namespace, provider, lifecycle, entity_id, max(window_expires_at) AS until
      FROM claims WHERE entity_id != ''
      GROUP BY namespace, provider, lifecycle, entity_id) AS w
WHERE w.namespace = entities.namespace AND w.provider = entities.provider
  AND w.lifecycle = entities.lifecycle AND w.entity_id = entities.entity_id;
UPDATE entities SET expires_at = max(entities.expires_at, w.until)
FROM (SELECT namespace, provider, lifecycle, entity_id, max(expires_at) AS until
      FROM deferrals
      GROUP BY namespace, provider, lifecycle, entity_id) AS w
WHERE w.namespace = entities.namespace AND w.provider = entities.provider
  AND w.lifecycle = entities.lifecycle AND w.entity_id = entities.entity_id;

-- Prune walks these.
CREATE INDEX entities_expires_at ON entities (expires_at);
CREATE INDEX deferrals_expires_at ON deferrals (expires_at);
