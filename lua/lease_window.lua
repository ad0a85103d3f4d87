-- lease_window.lua: a lease of fixed window units for one instance (redis/lease/storage.hpp).
--
-- The key counts the units leased out in one window (the fixed window's count: a unit is
-- counted when leased, not when spent). A lease grants at most what the window has left, so
-- the units spent, in every instance together, never exceed N. Unused units come back with the
-- instance's next lease of the key (or a flush), in the same call: one round trip.
--
-- KEY      string, the count of window k (the client puts k in the key name)
-- ARGV     N | want (units to lease, >= 0) | need (the least worth taking, <= want) |
--          give back (unused units of an ended lease of this window, >= 0) | TTL ms
-- Returns  { granted (0 when under need: nothing is taken), count before the grant }

local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local back = tonumber(ARGV[4])
if back > 0 and count > 0 then
  if back > count then back = count end
  count = count - back
  redis.call('DECRBY', KEYS[1], back)
end
local room = tonumber(ARGV[1]) - count
local grant = tonumber(ARGV[2])
if grant > room then grant = room end
if grant < tonumber(ARGV[3]) or grant <= 0 then return { 0, count } end
redis.call('INCRBY', KEYS[1], grant)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return { grant, count }
