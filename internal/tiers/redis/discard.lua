-- discard.lua: delete a record whose seal failed (fast.go, Reserve), so that
-- the durable tier's answer can be put in its place.
--
-- KEYS[1]  the record key: <prefix>{<namespace>:<provider>:<key>}
-- ARGV[1]  the value that failed, whole, as reserve.lua returned it
--
-- Returns 1 when it deleted the key, 0 when the key was left alone.
--
-- Invariant: compare-and-delete, like abort.lua. Only the very value that
-- failed is deleted; a record put since, a pending marker or an absent key
-- stays.

if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
