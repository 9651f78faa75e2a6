-- reserve.lua: the fast tier's half of a Claim (tiers.Fast.Reserve), the
-- step that must be atomic: of any number of concurrent Reserves of an
-- absent key, exactly one places its pending marker.
--
-- KEYS[1]  the record key: <prefix>{<namespace>:<provider>:<key>}
-- ARGV[1]  now_us          the service clock's reading, unix microseconds
-- ARGV[2]  nonce           unique per claim call; names our pending marker
-- ARGV[3]  pending_ttl_ms  lifetime of a marker we place, >= 1
--
-- Returns one of (the Go side names the same numbers in fast.go):
--   {1}         RESERVED  the key was absent, held a marker that lapsed, or
--                         held our own marker (a retried call); our marker
--                         stands there now
--   {2, value}  RECORD    the key holds a record (or something that is not
--                         a marker): its value, whole. The Go side checks
--                         its seal and decides from it as tiers.DecideFast
--                         does; a verdict on a record never writes, so it
--                         need not be taken here.
--   {3, nonce}  ASK       another claim's live marker, the nonce it carries:
--                         that claim may be in flight, committed or dead,
--                         and only the durable tier knows (tiers.FastAskDurable)
--
-- Layout (codec.go): one string per key. A pending marker is
-- "p<until_us>:<nonce>"; anything else is a record. A key of another type
-- (a hash: the layout of claimd 0.1 and of builds before issue 36, met
-- during a rolling upgrade) counts as absent: our marker replaces it, and
-- the durable tier decides and puts its answer in the new layout. The cache loses that copy, as it
-- may lose any; the durable tier holds the record.
--
-- Invariants. Time comes from ARGV[1] only, never from Redis TIME, so that
-- every tier decides against the one injected clock (the marker's PX is
-- housekeeping, not a decision: the until it carries is). Only an absent
-- key, another type, a lapsed or our own marker is written; a record never
-- is here, only by put.lua. A marker that does not parse counts as lapsed.
--
-- Numbers: Lua numbers are doubles, exact up to 2^53; unix microseconds stay
-- below that until the year 2255.

local key = KEYS[1]
local now = tonumber(ARGV[1])
local nonce = ARGV[2]
local ttl_ms = tonumber(ARGV[3])

local v = redis.pcall('GET', key)
if type(v) == 'string' then
  if string.byte(v, 1) ~= 112 then -- not 'p': a record
    return {2, v}
  end
  local till, owner = string.match(v, '^p(%d+):(.*)$')
  if owner and owner ~= nonce and tonumber(till) > now then
    return {3, owner}
  end
end
redis.call('SET', key, 'p' .. string.format('%.0f', now + ttl_ms * 1000) .. ':' .. nonce, 'PX', ttl_ms)
return {1}
