-- put.lua: cache a record decided by the durable tier (tiers.Fast.Put).
--
-- KEYS[1]   the record key: <prefix>{<namespace>:<provider>:<key>}
-- ARGV[1]   version of the record
-- ARGV[2]   window end, unix milliseconds rounded up
-- ARGV[3..] state, token, attempt, reason, released, holder, attempt_id,
--           payload, result, first_seen, lease, window, updated, owner,
--           mac (the fields of reserve.lua's FIELDS after 'pending_until',
--           'version' excepted; times in unix microseconds; owner is the
--           salt and secret hash in one value, mac the record's seal)
-- ARGV[18]  "" (tiers.Fast.Put), or the nonce of a pending marker
--           (tiers.Fast.Fill): then the record replaces that marker only
--
-- Returns 1 when it wrote the record, 0 when the key holds the same or a
-- newer version (for a Fill: anything but that marker).
--
-- Invariants. A record replaces only an absent key, a pending marker (which
-- counts as version 0), or an older version of itself: a slow Put never
-- undoes a newer one. A Fill copies a record that was only read, and
-- replaces nothing but the marker seen before the read: while it stands,
-- nothing was written to the key since. Versions are ordered by (window end, version): a
-- record of a later window is newer whatever its version, because after a
-- prune a key claimed anew starts again at version 1. The key expires at the record's window end (PEXPIREAT,
-- rounded up to the millisecond), so the fast tier never outlives the durable
-- record's window; a window already over deletes the key at once.
--
-- The script cannot tell a forged record from a sealed one: a forged record
-- that claims a newer version keeps this Put out until the next Reserve of
-- the key finds that its seal fails and discards it (fast.go, discard.lua).

local key = KEYS[1]
local version = tonumber(ARGV[1])

local window = tonumber(ARGV[14])

local cur = redis.call('HMGET', key, 'version', 'window', 'pending', 'salt')
if ARGV[18] ~= '' and (cur[1] or cur[3] ~= ARGV[18]) then
  return 0
end
if cur[1] then
  local curWindow = tonumber(cur[2]) or 0
  if curWindow > window or (curWindow == window and (tonumber(cur[1]) or 0) >= version) then
    return 0
  end
end

-- HSET overwrites every field of an older record; the pending marker's own
-- fields go right after. Not DEL then HSET: the key must never stop existing
-- inside the script, because while Redis Cluster migrates its slot a key
-- that is absent belongs to the target node, and touching it again fails
-- ("Script attempted to access a non local key").
redis.call('HSET', key,
  'state', ARGV[3],
  'token', ARGV[4],
  'version', ARGV[1],
  'attempt', ARGV[5],
  'reason', ARGV[6],
  'released', ARGV[7],
  'holder', ARGV[8],
  'attempt_id', ARGV[9],
  'payload', ARGV[10],
  'result', ARGV[11],
  'first_seen', ARGV[12],
  'lease', ARGV[13],
  'window', ARGV[14],
  'updated', ARGV[15],
  'owner', ARGV[16],
  'mac', ARGV[17])
if cur[4] then
  -- A record of claimd 0.3 or earlier kept the owner's salt and secret
  -- hash in fields of their own.
  redis.call('HDEL', key, 'salt', 'secret_hash')
end
if not cur[1] then
  -- No record yet: the key may hold a pending marker, which the record
  -- replaces (a record and a marker never share a key).
  redis.call('HDEL', key, 'pending', 'pending_until')
end
redis.call('PEXPIREAT', key, ARGV[2])
return 1
