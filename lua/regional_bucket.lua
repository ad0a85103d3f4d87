-- regional_bucket.lua: one token bucket or leaky bucket decision against this region's Redis,
-- debiting every region's admissions (redis/regional/bucket.hpp; the bound's proof is there).
--
-- A key's hash holds its GCRA state (lua/gcra.lua: `at`, the instant the bucket is full again,
-- as whole us 'a' plus a remainder 'r' in 1/count ns, and 'l', the latest decision's time, us),
-- the units each region admitted, n:<region> (this region's own grows here, the others' grow
-- when their exchange pushes: HINCRBY of the difference, as lua/regional_window.lua), and
-- 'x', the units of other regions already debited. A decision first debits what the other
-- regions admitted since, x' = sum of their n: fields, whether or not the bucket holds them
-- (at <- max(at, t) + (x' - x) period/count: `at` may go past t + a whole refill), then decides
-- as a token bucket (or leaky bucket) does. unseen = n:<self> - min over r of s:<r> (the exchange's
-- bookkeeping, as in lua/regional_window.lua): admit n only if unseen + n <= U.
-- Exact in doubles as lua/gcra.lua; the debit's remainder product (units x rem) is exact below
-- 2^53 and otherwise rounded up to one whole us per unit (more backlog: never more tokens).
-- Fields are written with HINCRBY of the difference (numbers pass to redis.call exactly).
--
-- KEYS     dirty set (as lua/regional_window.lua) | the key's hash
-- ARGV     now_us | Uc (1000 x count: one us in 1/count ns) | n_us | n_rem | slack_us |
--          slack_rem (-1 when n > limit) | peek ('1' changes nothing) | TTL beyond full, ms |
--          wait_us | wait_rem (leaky bucket's max_wait as lua/gcra.lua; '' for no bound) |
--          self | unit_us | unit_rem (one unit's worth, period/count, as a pair) |
--          U (-1: no other region, no bound) | n (units, at most limit + 1) | m | m region names
--          (those whose acknowledgements bound `unseen`: the others but the excluded ones)
-- Returns  { admitted (0|1), reason (0 admitted, 1 the bucket, 2 unseen), t (us), at_us,
--          at_rem, unseen, debited } with `at` after the debit and before the decision.
-- TTL      until the bucket is full again plus the given time (the exchange's lag and margin):
--          never shortened; the exchange keeps a hash whose units are unacknowledged.

local TWO53 = 9007199254740992

local function pair_le(a_us, a_rem, b_us, b_rem)
  return a_us < b_us or (a_us == b_us and a_rem <= b_rem)
end

local A = ARGV
local h = KEYS[2]
local uc = tonumber(A[2])
local self = A[11]
local m = tonumber(A[16])
local remotes = {}
for i = 1, m do remotes[i] = A[16 + i] end

local flat = redis.call('HGETALL', h)
local f = {}
for i = 1, #flat, 2 do f[flat[i]] = tonumber(flat[i + 1]) end
local at0, rem0, last0, x0 = f['a'] or 0, f['r'] or 0, f['l'] or 0, f['x'] or 0
local at, rem = at0, rem0
if rem >= uc then at, rem = at + 1, 0 end  -- written under another count: round up (gcra.lua)
local t = tonumber(A[1])
if last0 > t then t = last0 end

-- Debit what the other regions admitted and this one has not debited yet.
local others = 0
for k, v in pairs(f) do
  if string.sub(k, 1, 2) == 'n:' and k ~= 'n:' .. self then others = others + v end
end
local debit = others - x0
if debit < 0 then debit = 0 end
if debit > 0 then
  if at < t or (at == t and rem == 0) then at, rem = t, 0 end
  local unit_us, unit_rem = tonumber(A[12]), tonumber(A[13])
  at = at + debit * unit_us
  local extra = debit * unit_rem
  if extra < TWO53 then
    local carry = math.floor(extra / uc)
    local r = extra - carry * uc
    if r < 0 then carry, r = carry - 1, r + uc elseif r >= uc then carry, r = carry + 1, r - uc end
    at, rem = at + carry, rem + r
    if rem >= uc then at, rem = at + 1, rem - uc end
  elseif unit_rem > 0 then
    at = at + debit  -- rounded up: unit_rem / uc < 1 us per unit
  end
end

local d_us, d_rem = 0, 0
if at > t or (at == t and rem > 0) then d_us, d_rem = at - t, rem end
local reason = 0
if not pair_le(d_us, d_rem, tonumber(A[5]), tonumber(A[6])) then
  reason = 1
elseif A[9] ~= '' and not pair_le(d_us, d_rem, tonumber(A[9]), tonumber(A[10])) then
  reason = 1
end
local mine = f['n:' .. self] or 0
local seen = mine
for _, r in ipairs(remotes) do
  local s = f['s:' .. r] or 0
  if s < seen then seen = s end
end
local unseen = mine - seen
local n, bound = tonumber(A[15]), tonumber(A[14])
if reason == 0 and bound >= 0 and unseen + n > bound then reason = 2 end
local reply = { reason == 0 and 1 or 0, reason, t, at, rem, unseen, debit }

if A[7] == '1' or (reason ~= 0 and debit == 0) then return reply end
if reason == 0 then
  if at < t or (at == t and rem == 0) then at, rem = t, 0 end
  at, rem = at + tonumber(A[3]), rem + tonumber(A[4])
  if rem >= uc then at, rem = at + 1, rem - uc end
  redis.call('HINCRBY', h, 'n:' .. self, n)
end
if at ~= at0 then redis.call('HINCRBY', h, 'a', at - at0) end
if rem ~= rem0 then redis.call('HINCRBY', h, 'r', rem - rem0) end
if t ~= last0 then redis.call('HINCRBY', h, 'l', t - last0) end
if debit > 0 then redis.call('HINCRBY', h, 'x', debit) end
local ahead = at - t
if ahead < 0 then ahead = 0 end
local ttl = math.floor(ahead / 1000) + 1 + tonumber(A[8])
if redis.call('PTTL', h) < ttl then redis.call('PEXPIRE', h, ttl) end
if reason == 0 and bound >= 0 then  -- other regions exist (some may be left out: excluded)
  redis.call('SADD', KEYS[1], h)
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
end
return reply
