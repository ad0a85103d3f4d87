-- lease_bucket.lua: a lease of token bucket tokens for one instance (redis/lease/bucket.hpp).
--
-- The key is the shared bucket as GCRA (ITU-T I.371) keeps it: the instant `at` when it is
-- full again. Its deficit at t is D = max(0, at - t), in 1/count ns: a token is worth `period`
-- of them, a full bucket C x period. A lease debits the tokens it takes when it is taken, so
-- the bucket holds what is neither spent nor leased; unused tokens come back with the
-- instance's next lease of the key (or a flush), in the same call: one round trip.
--
-- Give back: the client sends the credit already decayed, (unused x period - age x count)+:
-- the refill the bucket received while the lease held those tokens is not credited twice
-- (docs/far.md proves the r H bound with it). The credit never takes D below 0: the bucket
-- never holds more than C (that floor binds only when clocks disagree or the key was lost).
-- Grant: min(want, floor((C x period - D) / period)) tokens, none when that is under need.
--
-- Exact in doubles: C x period <= 2^52 (checked by the client), U = 1000 x count <= 10^12,
-- and `at` is held as whole us plus a remainder in [0, U). A deficit past C x period (a clock
-- behind the writer's) grants nothing and writes nothing: it only denies more.
--
-- KEY      string, struct '<ddd': at_us, at_rem (1/count ns), the writer's U. A remainder
--          written under another U is rounded up to the next whole us (never more tokens).
-- ARGV     t_us | t_rem (t's sub-us part in 1/count ns) | U | period (a token, 1/count ns) |
--          C x period | want (>= 0) | need (<= want) | credit (1/count ns, >= 0) |
--          TTL margin ms
-- Returns  { granted (0 when under need: nothing is taken), D after the credit and before the
--            grant (1/count ns, at most C x period + 1) }
-- TTL      until the bucket is full again, plus the margin; deleted when full.

local t_us, t_rem, unit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local worth, full = tonumber(ARGV[4]), tonumber(ARGV[5])
local deficit = 0
local s = redis.call('GET', KEYS[1])
if s then
  if #s ~= 24 then error('ratelimit: ' .. KEYS[1] .. ' does not hold a leased bucket') end
  local at_us, at_rem, u = struct.unpack('<ddd', s)
  if u ~= unit and at_rem > 0 then at_us, at_rem = at_us + 1, 0 end
  if at_us > t_us + full / unit + 1 then return { 0, full + 1 } end
  if at_us > t_us or (at_us == t_us and at_rem > t_rem) then
    deficit = (at_us - t_us) * unit + at_rem - t_rem
  end
  if deficit > full then return { 0, full + 1 } end
end
local credit = tonumber(ARGV[8])
local before = deficit
deficit = deficit - credit
if deficit < 0 then deficit = 0 end
-- avail = floor((full - deficit) / worth), exact: the float quotient is within one.
local room = full - deficit
local avail = math.floor(room / worth)
if avail * worth > room then avail = avail - 1 end
if (avail + 1) * worth <= room then avail = avail + 1 end
local grant = tonumber(ARGV[6])
if grant > avail then grant = avail end
if grant < tonumber(ARGV[7]) or grant <= 0 then grant = 0 end
local after = deficit + grant * worth
if after == before then return { grant, deficit } end
if after == 0 then
  redis.call('DEL', KEYS[1])
  return { grant, deficit }
end
-- at = t + after, carried into whole us
local total = t_rem + after
local carry = math.floor(total / unit)
if carry * unit > total then carry = carry - 1 end
if (carry + 1) * unit <= total then carry = carry + 1 end
local ttl = math.floor(after / (unit * 1000)) + 1 + tonumber(ARGV[9])
redis.call('SET', KEYS[1], struct.pack('<ddd', t_us + carry, total - carry * unit, unit), 'PX',
           ttl)
return { grant, deficit }
