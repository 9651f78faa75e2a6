-- deferred_count counts the deferred events not applied since (the last
-- decision on them was DEFERRED) of the providers in $1, and of them those
-- first seen before their provider's cutoff: $1 providers and $2 cutoffs,
-- one element each.
SELECT count(*), count(*) FILTER (WHERE d.first_seen_at < c.cutoff)
FROM deferrals d
JOIN unnest($1::text[], $2::timestamptz[]) AS c(provider, cutoff) ON c.provider = d.provider
WHERE NOT d.applied AND NOT d.superseded
