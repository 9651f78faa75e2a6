-- audit_list reads one page of a key's audit log, oldest at first (then id:
-- the order of the rows' inserts), after the keyset position ($4, $5) of
-- the previous page's last row; $6 is the page size plus one, so that the
-- caller knows whether another page follows. audit_log_key (0007) answers
-- it from one range of each month's index, in order: the position is part
-- of the index condition (the first page passes one before every row
-- rather than NULL, which would turn it into a filter over the key's whole
-- log).
--
-- $1 namespace, $2 provider, $3 key, $4 at and $5 id of the position.
SELECT id, at, op, coalesce(outcome, 0), coalesce(reason, 0), state, token, holder,
       principal, transport, effect_recovered, payload_sha256
FROM audit_log
WHERE namespace = $1 AND provider = $2 AND key = $3
  AND (at, id) > ($4::timestamptz, $5::bigint)
ORDER BY at, id
LIMIT $6
