-- lease_window.lua: a lease of window units for one instance (redis/lease/storage.hpp).
--
-- The key counts the units leased out in one window (a unit is counted when leased, not when
-- spent). A lease grants at most the window's room, so the units spent, in every instance
-- together, never exceed what the limit allows. Unused units come back with the instance's
-- next lease of the key (or a flush), in the same call: one round trip.
--
-- Fixed window: room = N - c. Sliding counter (KEYS[3] given: the count p of window k - 1, e =
-- t - kW): room = N - c - ceil(p (W - e) / W), the most that keeps (c + g) W + p (W - e) <= N W
-- at the lease's time; the previous window only weighs less later in window k, so units spent
-- later stay within the limit. Exact while p (W - e) < 2^53; beyond, the ceiling is taken one
-- higher, which only ever grants less.
--
-- Lease records: each lease whose units are not all spent at once leaves a record in a sorted
-- set beside the count, member "<id>:<units>" (its unconfirmed units), score its expiry (the
-- lease's time + H + the reclaim grace, us, by the leaser's clock). The holder's give-back
-- names its records and removes them. Every call first reclaims records whose expiry is at or
-- before its own time (at most 64 a call): their units go back to the count, so a holder that
-- died (or stopped calling) loses its unused units for at most H + grace. A live holder whose
-- record was reclaimed confirms late: its give-back then adds back what it had spent of the
-- reclaimed units (count += reclaimed - back), so the count ends exact; meanwhile the window
-- may have over-admitted by those units (docs/far.md, Limits).
--
-- KEYS     the count of window k | its lease records | (sliding only) the count of window k - 1
-- ARGV     N | want (units to lease, >= 0) | need (units spent at once, <= want) |
--          give back (unused units of an ended lease of window k, >= 0) | TTL ms |
--          W, us | e, us | t, us | new record's expiry, us | new record's id |
--          the ended lease's records ("<id>:<units>", any number)
-- Returns  { granted (0 when under need: nothing is taken), c before the grant, p,
--            room left after the grant, units reclaimed from expired records }

local function units_of(member) return tonumber(string.match(member, ':(%d+)$') or '0') end
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
-- the holder's own records first: what they held unconfirmed, and what is still recorded
local held, recorded = 0, 0
for i = 11, #ARGV do
  local u = units_of(ARGV[i])
  held = held + u
  recorded = recorded + u * redis.call('ZREM', KEYS[2], ARGV[i])
end
-- then records whose expiry passed: their holders stopped spending them
local reclaimed = 0
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[8], 'LIMIT', 0, 64)
for _, m in ipairs(dead) do
  reclaimed = reclaimed + units_of(m)
  redis.call('ZREM', KEYS[2], m)
end
-- count ends with the held units the holder spent (held - back), of which `recorded` were still
-- counted; reclaimed records leave the count
local change = (held - tonumber(ARGV[4])) - recorded - reclaimed
if change > 0 then
  count = count + change
  redis.call('INCRBY', KEYS[1], change)
  redis.call('PEXPIRE', KEYS[1], ARGV[5])  -- the key may have been gone: never without a TTL
elseif change < 0 and count > 0 then
  if -change > count then change = -count end
  count = count + change
  redis.call('DECRBY', KEYS[1], -change)
end
local prev = 0
if KEYS[3] then prev = tonumber(redis.call('GET', KEYS[3]) or '0') end
local room = tonumber(ARGV[1]) - count
if prev > 0 then
  local w = tonumber(ARGV[6])
  local weighted = prev * (w - tonumber(ARGV[7]))
  local q = math.floor(weighted / w)
  if weighted >= 9007199254740992 then
    q = q + 2  -- the product itself was rounded: err high
  else
    -- the exact floor (the float quotient is within one), then the ceiling
    if q * w > weighted then q = q - 1 end
    if (q + 1) * w <= weighted then q = q + 1 end
    if q * w < weighted then q = q + 1 end
  end
  room = room - q
end
local grant = tonumber(ARGV[2])
if grant > room then grant = room end
if grant < tonumber(ARGV[3]) or grant <= 0 then
  return { 0, count, prev, math.max(room, 0), reclaimed }
end
redis.call('INCRBY', KEYS[1], grant)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
local unconfirmed = grant - tonumber(ARGV[3])
if unconfirmed > 0 then
  redis.call('ZADD', KEYS[2], ARGV[9], ARGV[10] .. ':' .. unconfirmed)
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
end
return { grant, count, prev, room - grant, reclaimed }
