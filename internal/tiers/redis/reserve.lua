-- reserve.lua: the fast tier's half of a Claim (tiers.Fast.Reserve), decided
-- in one atomic step: of any number of concurrent Reserves of an absent key,
-- exactly one places its pending marker.
--
-- KEYS[1]  the record key: <prefix>{<namespace>:<provider>:<key>}
-- ARGV[1]  now_us          the service clock's reading, unix microseconds
-- ARGV[2]  nonce           unique per claim call; names our pending marker
-- ARGV[3]  pending_ttl_ms  lifetime of a marker we place, >= 1
-- ARGV[4]  payload hash    raw bytes, or "" when unknown
-- ARGV[5]  attempt_id      or ""
--
-- Returns {verdict} when verdict is RESERVED, {ASK, nonce} for ASK, else
-- {verdict, v1, ..., v18}
-- where v1..v18 are the key's fields in the order of FIELDS (nil if unset).
-- Verdicts (the Go side names the same numbers in fast.go):
--   1 RESERVED   the key was absent, held an expired marker, or held our own
--                marker (a retried call); our marker stands there now
--   2            (no longer answered; it was IN_PROGRESS from a marker)
--   3 TAKEOVER   window over, released, or lease over: only the durable
--                tier may hand the record over
--   4 MISMATCH   PAYLOAD_MISMATCH
--   5 DUPLICATE  the record is terminal within its window
--   6 AGAIN      the same attempt_id holds a live lease: the same ACQUIRED
--                (the record's owner field, its salt and secret hash, comes back with it, so
--                the service can give the owner the same lease secret)
--   7 BUSY       another holder's lease is live: IN_PROGRESS
--   8 ASK        another claim's marker is live: that claim may be in
--                flight, committed (a first claim leaves its marker for its
--                lease) or dead, and only the durable tier knows, so it
--                decides; no marker is placed. Returns {ASK, nonce}: the
--                marker met, which put.lua may replace with what the durable
--                tier answers (tiers.Fast.Fill).
--
-- Invariants. This is tiers.DecideFast, and the conformance suite compares
-- the two over a generated table of entries and claims: the checks on a
-- record run in the order of tiers.Decide, so the fast tier never answers
-- what the durable tier would not. Time comes from
-- ARGV[1] only, never from Redis TIME, so that every tier decides against the
-- one injected clock (the marker's PEXPIRE is housekeeping, not a decision:
-- pending_until is). Only an absent key or a dead marker is written; a record
-- is never changed here, only by put.lua.
--
-- Integrity. The script cannot check a record's seal (the 'mac' field, an
-- HMAC under a key Redis never sees), so a verdict on a record is only a
-- proposal: the Go side (fast.go) verifies the record it comes back with
-- and, when the seal fails, discards the record (discard.lua) and lets the
-- durable tier decide. That is why a verdict on a record never writes, and
-- why values a forger may have mangled read as numbers with a fallback
-- rather than failing the script.
--
-- Numbers: Lua numbers are doubles, exact up to 2^53; unix microseconds stay
-- below that until the year 2255. Stored values are the strings Go sent, so
-- reading them back is exact whatever Lua does.

local FIELDS = {
  'pending', 'pending_until', -- a pending marker holds only these two
  'state', 'token', 'version', 'attempt', 'reason', 'released',
  'holder', 'attempt_id', 'payload', 'result',
  'first_seen', 'lease', 'window', 'updated', -- unix microseconds
  'owner', -- the owner's salt and secret hash, in one value (codec.go)
  'mac', -- the record's seal (internal/tiers/seal), checked by the Go side
}
local RESERVED, TAKEOVER, MISMATCH, DUPLICATE, AGAIN, BUSY, ASK = 1, 3, 4, 5, 6, 7, 8

local key = KEYS[1]
local now = tonumber(ARGV[1])
local nonce = ARGV[2]
local ttl_ms = tonumber(ARGV[3])
local payload = ARGV[4]
local attempt_id = ARGV[5]

local function reserve()
  redis.call('HSET', key, 'pending', nonce,
    'pending_until', string.format('%.0f', now + ttl_ms * 1000))
  redis.call('PEXPIRE', key, ttl_ms)
  return {RESERVED}
end

-- A first delivery finds no key: reserve without reading 18 fields back.
if redis.call('EXISTS', key) == 0 then
  return reserve()
end

local v = redis.call('HMGET', key, unpack(FIELDS))

local function answer(verdict)
  return {verdict, unpack(v, 1, #FIELDS)}
end

if not v[3] then
  -- No record: absent, or a pending marker.
  if not v[1] or v[1] == nonce or (tonumber(v[2]) or 0) <= now then
    return reserve()
  end
  return {ASK, v[1]}
end

local lease = tonumber(v[14]) or 0
local window = tonumber(v[15]) or 0
local released = v[8] == '1'
local lease_live = not released and now < lease

if now >= window then
  return answer(TAKEOVER)
end
if payload ~= '' and v[11] and v[11] ~= '' and v[11] ~= payload then
  return answer(MISMATCH)
end
if v[3] == 'SETTLED' or v[3] == 'FAILED' then
  return answer(DUPLICATE)
end
if attempt_id ~= '' and attempt_id == v[10] and lease_live then
  return answer(AGAIN)
end
if released then
  return answer(TAKEOVER)
end
if lease_live then
  return answer(BUSY)
end
return answer(TAKEOVER)
