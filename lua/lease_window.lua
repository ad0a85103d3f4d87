-- lease_window.lua: a lease of window units for one instance (redis/lease/storage.hpp).
--
-- The key counts the units leased out in one window (a unit is counted when leased, not when
-- spent). A lease grants at most the window's room, so the units spent, in every instance
-- together, never exceed what the limit allows. Unused units come back with the instance's
-- next lease of the key (or a flush), in the same call: one round trip.
--
-- Fixed window: room = N - c. Sliding counter (KEYS[2] given: the count p of window k - 1, e =
-- t - kW): room = N - c - ceil(p (W - e) / W), the most that keeps (c + g) W + p (W - e) <= N W
-- at the lease's time; the previous window only weighs less later in window k, so units spent
-- later stay within the limit. Exact while p (W - e) < 2^53; beyond, the ceiling is taken one
-- higher, which only ever grants less.
--
-- KEYS     the count of window k | (sliding only) the count of window k - 1
-- ARGV     N | want (units to lease, >= 0) | need (the least worth taking, <= want) |
--          give back (unused units of an ended lease of window k, >= 0) | TTL ms |
--          W, us | e, us
-- Returns  { granted (0 when under need: nothing is taken), c before the grant, p,
--            room left after the grant }

local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local back = tonumber(ARGV[4])
if back > 0 and count > 0 then
  if back > count then back = count end
  count = count - back
  redis.call('DECRBY', KEYS[1], back)
end
local prev = 0
if KEYS[2] then prev = tonumber(redis.call('GET', KEYS[2]) or '0') end
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
if grant < tonumber(ARGV[3]) or grant <= 0 then return { 0, count, prev, math.max(room, 0) } end
redis.call('INCRBY', KEYS[1], grant)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return { grant, count, prev, room - grant }
