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
-- Lease records: a lease that keeps unspent tokens leaves a record in a sorted set beside the
-- bucket, member "<id>:<g x period>:<s_us>:<unspent x period>", score its expiry (s + H + the
-- reclaim grace, us, by the leaser's clock). The holder's give-back names its records and
-- removes them; its credit counts only if they were all still there (one reclaimed already
-- credited at least as much). Every call first reclaims records whose expiry is at or before
-- its own time (at most 64 a call), crediting each its decayed term min(unspent x period,
-- (g x period - age x count)+) as a give-back would, so a holder that died loses at most its
-- term, not its unspent tokens' worth until the bucket refills.
--
-- KEYS     the bucket | its lease records
--          (the bucket: string, struct '<ddd': at_us, at_rem (1/count ns), the writer's U. A
--          remainder written under another U is rounded up to the next whole us: never more
--          tokens.)
-- ARGV     t_us | t_rem (t's sub-us part in 1/count ns) | U | period (a token, 1/count ns) |
--          C x period | want (>= 0) | need (tokens spent at once, <= want) |
--          credit (1/count ns, >= 0) | TTL margin ms | new record's expiry, us |
--          new record's id | the ended lease's records (any number)
-- Returns  { granted (0 when under need: nothing is taken), D after the credit and before the
--            grant (1/count ns, at most C x period + 1), credit reclaimed (1/count ns) }
-- TTL      until the bucket is full again, plus the margin; deleted when full.

local t_us, t_rem, unit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local worth, full = tonumber(ARGV[4]), tonumber(ARGV[5])
local deficit = 0
local s = redis.call('GET', KEYS[1])
if s then
  if #s ~= 24 then error('ratelimit: ' .. KEYS[1] .. ' does not hold a leased bucket') end
  local at_us, at_rem, u = struct.unpack('<ddd', s)
  if u ~= unit and at_rem > 0 then at_us, at_rem = at_us + 1, 0 end
  if at_us > t_us + full / unit + 1 then return { 0, full + 1, 0 } end
  if at_us > t_us or (at_us == t_us and at_rem > t_rem) then
    deficit = (at_us - t_us) * unit + at_rem - t_rem
  end
  if deficit > full then return { 0, full + 1, 0 } end
end
-- the holder's own records: its credit counts only if none was reclaimed
local credit = tonumber(ARGV[8])
for i = 12, #ARGV do
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 0 then credit = 0 end
end
local reclaimed = 0
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, 64)
for _, m in ipairs(dead) do
  local base, s_us, unspent = string.match(m, ':(%d+):(%d+):(%d+)$')
  local term = tonumber(base or '0') - (t_us - tonumber(s_us or ARGV[1])) * unit
  local c = math.min(tonumber(unspent or '0'), term)
  if c > 0 then reclaimed = reclaimed + c end
  redis.call('ZREM', KEYS[2], m)
end
credit = credit + reclaimed
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
local ttl = math.floor(after / (unit * 1000)) + 1 + tonumber(ARGV[9])
if grant > tonumber(ARGV[7]) then
  redis.call('ZADD', KEYS[2], ARGV[10], string.format('%s:%d:%d:%d', ARGV[11], grant * worth, t_us,
             (grant - tonumber(ARGV[7])) * worth))
  redis.call('PEXPIRE', KEYS[2], ttl + math.ceil((tonumber(ARGV[10]) - t_us) / 1000))
end
if after == before then return { grant, deficit, reclaimed } end
if after == 0 then
  redis.call('DEL', KEYS[1])
  return { grant, deficit, reclaimed }
end
-- at = t + after, carried into whole us
local total = t_rem + after
local carry = math.floor(total / unit)
if carry * unit > total then carry = carry - 1 end
if (carry + 1) * unit <= total then carry = carry + 1 end
redis.call('SET', KEYS[1], struct.pack('<ddd', t_us + carry, total - carry * unit, unit), 'PX',
           ttl)
return { grant, deficit, reclaimed }
