-- regional_window.lua: one fixed window or sliding window counter decision against this
-- region's Redis, counting every region's admissions (redis/regional/storage.hpp).
--
-- A window's hash holds one field per region, n:<region> = the units that region admitted in
-- the window: this region's own field grows here, the others' grow when their exchange pushes
-- what they admitted (HINCRBY of the difference). The count c is the sum of the n: fields.
-- Beside them, this region's bookkeeping for each other region r: c:<r> = units claimed for a
-- push to r, s:<r> = units r acknowledged. unseen = n:<self> - min over r of s:<r>: what this
-- region admitted that some region has not seen.
-- Fixed window: admit n iff c + n <= N and unseen + n <= U. Sliding counter, with e = t - kW
-- and p, unseen_p the previous window's: admit iff (c + n) W + p (W - e) <= N W and
-- (unseen + n) W + unseen_p (W - e) <= U W (the same estimate for both). Products are compared
-- as two limbs: exact in doubles for counts below 2^30 and W below 2^45 us.
--
-- KEYS     dirty set (hashes this region admitted into and has not yet pushed everywhere; its
--          TTL is the longest any admission gave it) |
--          hash of window k | (sliding only) hash of window k - 1
-- ARGV     self | n (at most N + 1) | N | U (-1: no other region, no bound) | W, us | e, us |
--          peek ('1' changes nothing) | TTL of window k's hash, ms | m | m region names (the
--          regions whose acknowledgements bound `unseen`: every other region but those this
--          one excludes, redis/regional/exchange.hpp)
-- Returns  { admitted (0|1), reason (0 admitted, 1 the limit, 2 unseen), c, p, unseen, unseen_p }
--          before the decision.

local LIMB = 4194304  -- 2^22

-- a x w as two limbs {hi, lo} with a x w = hi x 2^22 + lo (a < 2^30, w < 2^45).
local function product(a, w)
  local w_hi = math.floor(w / LIMB)
  local low = a * (w - w_hi * LIMB)
  local carry = math.floor(low / LIMB)
  return a * w_hi + carry, low - carry * LIMB
end

-- (a + n) W + prev (W - e) <= limit W, exactly.
local function within(a, n, prev, limit, w, e)
  local room = limit - a - n
  if room < 0 then return false end
  if prev == 0 then return true end
  local l_hi, l_lo = product(prev, w - e)
  local r_hi, r_lo = product(room, w)
  return l_hi < r_hi or (l_hi == r_hi and l_lo <= r_lo)
end

-- The count and this region's unseen units of one window's hash.
local function counts(key, self, remotes)
  if not key then return 0, 0 end
  local flat = redis.call('HGETALL', key)
  local total, fields = 0, {}
  for i = 1, #flat, 2 do
    local f, v = flat[i], tonumber(flat[i + 1])
    fields[f] = v
    if string.sub(f, 1, 2) == 'n:' then total = total + v end
  end
  local mine = fields['n:' .. self] or 0
  local seen = mine
  for _, r in ipairs(remotes) do
    local s = fields['s:' .. r] or 0
    if s < seen then seen = s end
  end
  return total, mine - seen
end

local self = ARGV[1]
local n, limit, bound = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local w, e = tonumber(ARGV[5]), tonumber(ARGV[6])
local remotes = {}
for i = 1, tonumber(ARGV[9]) do remotes[i] = ARGV[9 + i] end

local c, unseen = counts(KEYS[2], self, remotes)
local p, unseen_p = counts(KEYS[3], self, remotes)
local reason = 0
if not within(c, n, p, limit, w, e) then
  reason = 1
elseif bound >= 0 and not within(unseen, n, unseen_p, bound, w, e) then
  reason = 2
end
if reason == 0 and ARGV[7] ~= '1' then
  redis.call('HINCRBY', KEYS[2], 'n:' .. self, n)
  redis.call('PEXPIRE', KEYS[2], ARGV[8])
  if bound >= 0 then  -- other regions exist (some may be excluded: left out of `remotes`)
    redis.call('SADD', KEYS[1], KEYS[2])
    -- The set must outlive every hash it names: its TTL only grows. An admission stamped
    -- late in an older window (short TTL) must not shorten it below a newer window's.
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[8]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[8])
    end
  end
end
return { reason == 0 and 1 or 0, reason, c, p, unseen, unseen_p }
