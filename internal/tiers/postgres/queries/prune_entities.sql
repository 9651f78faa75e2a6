-- prune_entities deletes up to $2 entities and deferral rows whose last
-- window ended before $1, as prune.sql deletes claims: in bounded batches,
-- skipping rows a claim holds locked, checking the condition again on the
-- version deleted. An entity's applied events go with it (ON DELETE
-- CASCADE), counted from the statement's snapshot, which still holds them.
-- Every claim and deferral of an entity moves its expires_at to
-- its own window end at least, so an entity past it has no record left
-- within its window, its holder's included.
WITH n AS (
    DELETE FROM entities
    WHERE expires_at < $1
      AND (namespace, provider, lifecycle, entity_id) IN (
          SELECT namespace, provider, lifecycle, entity_id FROM entities
          WHERE expires_at < $1
          ORDER BY expires_at
          LIMIT $2
          FOR UPDATE SKIP LOCKED)
    RETURNING namespace, provider, lifecycle, entity_id
),
d AS (
    DELETE FROM deferrals
    WHERE expires_at < $1
      AND (namespace, provider, key) IN (
          SELECT namespace, provider, key FROM deferrals
          WHERE expires_at < $1
          ORDER BY expires_at
          LIMIT $2
          FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT (SELECT count(*) FROM n),
       (SELECT count(*) FROM entity_events v JOIN n USING (namespace, provider, lifecycle, entity_id)),
       (SELECT count(*) FROM d)
