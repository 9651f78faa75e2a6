-- discard.lua: delete a record whose seal failed (fast.go, Reserve), so that
-- the durable tier's answer can be put in its place.
--
-- KEYS[1]  the record key: <prefix>{<namespace>:<provider>:<key>}
-- ARGV[1]  the 'mac' field of the record that failed ("" when it had none)
--
-- Returns 1 when it deleted the key, 0 when the key was left alone.
--
-- Invariant: compare-and-delete, like abort.lua. Only a record that still
-- carries the seal that failed is deleted; a record put since (a sealed one,
-- with another seal), a pending marker (no 'state') or an absent key stays.
-- A forged record that happens to carry the seal of a real one differs from
-- it in some sealed field, so deleting it loses nothing the durable tier
-- does not hold.

local v = redis.call('HMGET', KEYS[1], 'state', 'mac')
if v[1] and (v[2] or '') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
