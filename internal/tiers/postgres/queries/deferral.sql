-- deferral records one DEFERRED or SUPERSEDED delivery of an event: the
-- first creates its row, every later one counts, moves last_seen_at and
-- records the latest decision. It returns the count, this delivery included.
-- A deferral after the event was applied (a new window of its key) starts
-- it over as not applied.
--
-- $1 namespace, $2 provider, $3 key, $4 lifecycle, $5 entity id, $6 event
-- type, $7 superseded, $8 now, $9 the states the event awaits (its From),
-- $10 the delivery's window end (now + ttl), $11 the lifecycle's initial
-- state.
INSERT INTO deferrals AS d (namespace, provider, key, lifecycle, entity_id, event_type, superseded,
                            count, first_seen_at, last_seen_at, awaiting, initial_state, applied, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $8, $9, $11, false, $10)
ON CONFLICT (namespace, provider, key) DO UPDATE SET
    lifecycle    = excluded.lifecycle,
    entity_id    = excluded.entity_id,
    event_type   = excluded.event_type,
    superseded   = excluded.superseded,
    count        = least(d.count::bigint + 1, 2147483647),
    last_seen_at = greatest(d.last_seen_at, excluded.last_seen_at),
    awaiting     = excluded.awaiting,
    initial_state = excluded.initial_state,
    applied      = false,
    expires_at   = greatest(d.expires_at, excluded.expires_at)
RETURNING count
