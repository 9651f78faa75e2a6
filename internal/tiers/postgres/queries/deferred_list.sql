-- deferred_list reads one page of deferred and superseded events of a
-- provider, or of one of its entities, newest last_seen_at first (then key,
-- descending, so that the order is total), after the keyset position
-- ($4, $5) of the previous page's last row; $6 is the page size plus one,
-- so that the caller knows whether another page follows.
--
-- $1 namespace, $2 provider, $3 entity id or '' for all, $4 last_seen_at
-- and $5 key of the cursor (NULL and '' for the first page).
SELECT d.lifecycle, d.entity_id, d.event_type, d.key, d.superseded, d.count,
       d.first_seen_at, d.last_seen_at, d.awaiting, coalesce(n.state, d.initial_state), d.applied
FROM deferrals d
LEFT JOIN entities n USING (namespace, provider, lifecycle, entity_id)
WHERE d.namespace = $1 AND d.provider = $2
  AND ($3 = '' OR d.entity_id = $3)
  AND ($4::timestamptz IS NULL OR (d.last_seen_at, d.key) < ($4::timestamptz, $5::text))
ORDER BY d.last_seen_at DESC, d.key DESC
LIMIT $6
