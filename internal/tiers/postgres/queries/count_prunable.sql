-- count_prunable counts what prune.sql and prune_entities.sql would delete
-- now with cutoff $1, by kind: records, entities, the applied events that
-- go with those entities, deferral rows (claimd prune --dry-run).
SELECT
    (SELECT count(*) FROM claims WHERE window_expires_at < $1),
    (SELECT count(*) FROM entities WHERE expires_at < $1),
    (SELECT count(*) FROM entity_events v
        JOIN entities e USING (namespace, provider, lifecycle, entity_id)
        WHERE e.expires_at < $1),
    (SELECT count(*) FROM deferrals WHERE expires_at < $1)
