-- deferred_count counts the deferred events not applied since (the last
-- decision on them was DEFERRED) of the providers in $1, and of them those
-- first seen before their provider's overdue and lost cutoffs: $1
-- providers, $2 overdue cutoffs and $3 lost cutoffs, one element each.
SELECT count(*),
       count(*) FILTER (WHERE d.first_seen_at < c.overdue),
       count(*) FILTER (WHERE d.first_seen_at < c.lost)
FROM deferrals d
JOIN unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS c(provider, overdue, lost) ON c.provider = d.provider
WHERE NOT d.applied AND NOT d.superseded
