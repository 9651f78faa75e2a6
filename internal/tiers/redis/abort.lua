-- abort.lua: withdraw our pending marker (tiers.Fast.Abort) after the durable
-- tier failed to answer.
--
-- KEYS[1]  the record key: <prefix>{<namespace>:<provider>:<key>}
-- ARGV[1]  nonce of the Reserve that placed the marker
--
-- Returns 1 when it deleted the marker, 0 when the key was left alone.
--
-- Invariant: compare-and-delete. Only a pending marker ("p<until>:<nonce>",
-- codec.go) carrying our nonce is deleted; another claim's marker, a record
-- Put since, or a key of another type stays.

local v = redis.pcall('GET', KEYS[1])
if type(v) == 'string' and string.match(v, '^p%d+:(.*)$') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
