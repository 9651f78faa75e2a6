-- put.lua: cache a record decided by the durable tier (tiers.Fast.Put), in
-- the cases a plain SET cannot decide alone (fast.go, putFast): a Fill;
-- putting back a newer record a Put's SET ... GET displaced (the newer is
-- this script's record then, replacing only the older one just written);
-- and a key of another type.
--
-- KEYS[1]  the record key: <prefix>{<namespace>:<provider>:<key>}
-- ARGV[1]  version of the record
-- ARGV[2]  window end, unix microseconds
-- ARGV[3]  window end, unix milliseconds rounded up (the key's expiry)
-- ARGV[4]  the record's value (codec.go: sealed, compact)
-- ARGV[5]  "" (tiers.Fast.Put), or the nonce of a pending marker
--          (tiers.Fast.Fill): then the record replaces that marker only
--
-- Returns 1 when it wrote the record, 0 when the key holds the same or a
-- newer version (for a Fill: anything but that marker).
--
-- Invariants. A record replaces only an absent key, a pending marker (which
-- counts as version 0), a key of another type (an older claimd's hash), or
-- an older version of itself: a slow Put never undoes a newer one. A Fill
-- copies a record that was only read, and replaces nothing but the marker
-- seen before the read: while it stands, nothing was written to the key
-- since. Versions are ordered by (window end, version): a record of a later
-- window is newer whatever its version, because after a prune a key claimed
-- anew starts again at version 1. The key expires at the record's window
-- end (PXAT, rounded up to the millisecond), so the fast tier never
-- outlives the durable record's window; a window already over deletes the
-- key at once.
--
-- A record's value starts with its format byte (1), then its window end
-- (field 1) and version (field 2) as protobuf varints: the two this script
-- reads. A value whose start does not read so counts as version 0 of no
-- window, and is replaced. The script cannot tell a forged record from a
-- sealed one: a forged record that claims a newer version keeps this Put
-- out until the next Reserve of the key finds that its seal fails and
-- discards it (fast.go, discard.lua).
--
-- SET replaces the value, whatever its type, in one step: the key never
-- stops existing inside the script, which matters while Redis Cluster
-- migrates its slot (a key that is absent belongs to the target node, and
-- touching it again fails with "Script attempted to access a non local key").

local key = KEYS[1]
local version = tonumber(ARGV[1])
local window = tonumber(ARGV[2])

-- varint reads a protobuf varint of v at byte i: the number and the next
-- position, or nil.
local function varint(v, i)
  local n, mul = 0, 1
  for j = i, i + 9 do
    local b = string.byte(v, j)
    if not b then
      return nil
    end
    n = n + (b % 128) * mul
    if b < 128 then
      return n, j + 1
    end
    mul = mul * 128
  end
  return nil
end

local cur = redis.pcall('GET', key)
if type(cur) ~= 'string' then
  cur = nil -- absent, or another type
end
if ARGV[5] ~= '' then
  if not cur or string.match(cur, '^p%d+:(.*)$') ~= ARGV[5] then
    return 0
  end
elseif cur and string.byte(cur, 1) == 1 then
  local curWindow, curVersion, i = 0, 0, 2
  if string.byte(cur, i) == 8 then -- field 1, varint
    curWindow, i = varint(cur, i + 1)
    if curWindow and string.byte(cur, i) == 16 then -- field 2, varint
      curVersion = varint(cur, i + 1) or 0
    end
    curWindow = curWindow or 0
  end
  if curWindow > window or (curWindow == window and curVersion >= version) then
    return 0
  end
end
redis.call('SET', key, ARGV[4], 'PXAT', ARGV[3])
return 1
