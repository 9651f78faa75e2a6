-- abort.lua: withdraw our pending marker (tiers.Fast.Abort) after the durable
-- tier failed to answer.
--
-- KEYS[1]  the record key: <prefix>{<namespace>:<provider>:<key>}
-- ARGV[1]  nonce of the Reserve that placed the marker
--
-- Returns 1 when it deleted the marker, 0 when the key was left alone.
--
-- Invariant: compare-and-delete. Only a pending marker carrying our nonce is
-- deleted; another claim's marker, or a record Put since (which has no
-- 'pending' field), stays.

if redis.call('HGET', KEYS[1], 'pending') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
