#pragma once
/// @file redis/detail/scripts.hpp
/// GENERATED from lua/*.lua by cmake/embed_lua.cmake: edit the .lua files, then run
///   cmake -DLUA_DIR=lua -DOUTPUT=include/ratelimit/redis/detail/scripts.hpp -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date).

#include <string_view>

namespace ratelimit::detail {

/// One Lua script: `body` is what EVAL sends, `sha1` what EVALSHA names.
/// Thread safety: constant.
struct RedisScript {
  std::string_view name;
  std::string_view sha1;
  std::string_view body;
};

namespace redis_scripts {

inline constexpr RedisScript token_bucket{
    "token_bucket", "f94763be9dc5bd9d6fd728f9fc1be778590599f0",
    R"lua(-- prelude.lua: shared by every ratelimit script. cmake/embed_lua.cmake prepends it to each
-- algorithm's script, so each EVALSHA body is self-contained.
--
-- Why big integers: Redis Lua numbers are IEEE doubles, exact only below 2^53. Times here are
-- whole microseconds (below 2^53 for every clock reading up to 2^62 ns), but products such as
-- (time in ns) x (tokens per period) reach about 2^93. Those are held as exact non-negative
-- integers in base 10^7 limbs, least significant first: a limb product is below 10^14 and
-- every intermediate below 2^53, so nothing ever rounds. Only TTLs use approximations, and
-- they round up.

local BASE = 10000000

-- A whole number below 2^53 as a decimal string. Never pass a bare number to redis.call:
-- Redis formats it with 14 significant digits.
local function fmt(x)
  return string.format('%.0f', x)
end

local function trim(a)
  while #a > 1 and a[#a] == 0 do a[#a] = nil end
  return a
end

-- A decimal string of digits (no sign) as a big integer.
local function bn(s)
  local r, i = {}, #s
  while i >= 1 do
    local j = i - 6
    if j < 1 then j = 1 end
    r[#r + 1] = tonumber(string.sub(s, j, i))
    i = j - 1
  end
  if #r == 0 then r[1] = 0 end
  return trim(r)
end

-- A whole number below 2^53 as a big integer.
local function bn_int(x)
  local r = {}
  repeat
    local d = x % BASE
    r[#r + 1] = d
    x = (x - d) / BASE
  until x == 0
  return r
end

-- -1, 0 or 1 as a < b, a = b, a > b.
local function bn_cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local function bn_add(a, b)
  local r, carry = {}, 0
  for i = 1, math.max(#a, #b) do
    local s = (a[i] or 0) + (b[i] or 0) + carry
    if s >= BASE then
      r[i], carry = s - BASE, 1
    else
      r[i], carry = s, 0
    end
  end
  if carry > 0 then r[#r + 1] = carry end
  return r
end

-- a - b, for a >= b.
local function bn_sub(a, b)
  local r, borrow = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - borrow
    if s < 0 then
      r[i], borrow = s + BASE, 1
    else
      r[i], borrow = s, 0
    end
  end
  return trim(r)
end

local function bn_mul(a, b)
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local carry = 0
    for j = 1, #b do
      local cur = r[i + j - 1] + a[i] * b[j] + carry
      local low = cur % BASE
      r[i + j - 1] = low
      carry = (cur - low) / BASE
    end
    local k = i + #b
    while carry > 0 do
      local cur = r[k] + carry
      local low = cur % BASE
      r[k] = low
      carry = (cur - low) / BASE
      k = k + 1
    end
  end
  return trim(r)
end

local function bn_str(a)
  local parts = { string.format('%d', a[#a]) }
  for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format('%07d', a[i]) end
  return table.concat(parts)
end

-- The nearest double (relative error about 2^-52): for TTLs and estimates only.
local function bn_approx(a)
  local x = 0
  for i = #a, 1, -1 do x = x * BASE + a[i] end
  return x
end

-- floor(a / d) as a number (the quotient must be below 2^53), d >= 1 given exactly (d_bn) and
-- as a double (d_approx): estimated in floating point, then corrected by exact products.
local function bn_floor_div(a, d_bn, d_approx)
  local q = math.floor(bn_approx(a) / d_approx)
  if q < 0 then q = 0 end
  while q > 0 and bn_cmp(bn_mul(bn_int(q), d_bn), a) > 0 do q = q - 1 end
  while bn_cmp(bn_mul(bn_int(q + 1), d_bn), a) <= 0 do q = q + 1 end
  return q
end

-- The decision's time in whole microseconds: the caller's (arg) or, when arg is empty, Redis's
-- own clock (TIME), so that hosts whose clocks disagree still share one time line. Scripts that
-- read TIME and then write need effects replication: the default since Redis 5; asked for
-- explicitly on older servers.
local function now_us(arg)
  if arg ~= '' then return tonumber(arg) end
  if redis.replicate_commands then redis.replicate_commands() end
  local tm = redis.call('TIME')
  return tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end

-- A PEXPIRE argument: ceil(ns / 10^6) ms, plus 1 ms that absorbs the estimate's rounding, plus
-- the caller's margin (ms) for clocks that disagree.
local function ttl_ms(ns_approx, margin_ms)
  return fmt(math.ceil(ns_approx / 1000000) + 1 + margin_ms)
end

-- Microseconds (a number) to nanoseconds (a big integer).
local function us_to_ns(t)
  return bn_mul(bn_int(t), bn_int(1000))
end

-- token_bucket.lua: one token bucket decision, atomically (the twin of TokenBucketModel).
--
-- Rule: tokens T start at B; at each decision T <- min(B, T + r * elapsed); a request of n
-- tokens is admitted iff T >= n, then T <- T - n.
-- Kept as GCRA (ITU-T I.371, virtual scheduling): one timestamp `at`, the instant the bucket is
-- full again, scaled by `count` (tokens per period, reduced) so fractions of a nanosecond stay
-- exact. With the backlog D = max(0, at - t): admit iff D + n*period <= B*period, then
-- at <- max(at, t) + n*period. All of D, at and t*count are in 1/count ns (big integers).
--
-- KEYS[1]  hash: at   = theoretical arrival time, ns x count (decimal)
--                last = latest admitted time, us (a request stamped earlier is decided then)
-- ARGV[1]  now, whole us; '' to read Redis TIME instead
-- ARGV[2]  count: tokens per period, reduced by gcd(count, period)
-- ARGV[3]  n x period (decimal): the request's cost in 1/count ns
-- ARGV[4]  B x period (decimal): a full bucket in the same unit
-- ARGV[5]  '1' for a peek (changes nothing), '0' otherwise
-- ARGV[6]  TTL margin, ms
-- Returns  { admitted (0|1), decision time (us, decimal), at before the decision (decimal) }:
--          the client derives remaining, retry_after and reset_after from these exactly.
-- TTL      the time until the bucket is full again (+1 ms, + margin): after that the key's
--          state decides exactly like a fresh key.

local state = redis.call('HMGET', KEYS[1], 'at', 'last')
local t = now_us(ARGV[1])
local last = tonumber(state[2]) or 0
if last > t then t = last end

local count = tonumber(ARGV[2])
local at = bn(state[1] or '0')
local scaled_t = bn_mul(us_to_ns(t), bn_int(count))
local ahead = bn_cmp(at, scaled_t) > 0
local backlog = ahead and bn_sub(at, scaled_t) or bn_int(0)
local cost = bn(ARGV[3])
local needed = bn_add(backlog, cost)
local admitted = bn_cmp(needed, bn(ARGV[4])) <= 0

if admitted and ARGV[5] ~= '1' then
  local new_at = bn_add(ahead and at or scaled_t, cost)
  redis.call('HSET', KEYS[1], 'at', bn_str(new_at), 'last', fmt(t))
  redis.call('PEXPIRE', KEYS[1], ttl_ms(bn_approx(needed) / count, tonumber(ARGV[6])))
end
return { admitted and 1 or 0, fmt(t), bn_str(at) }
)lua"};

inline constexpr RedisScript leaky_bucket{
    "leaky_bucket", "497171d7f472e53e83eb133643c3a5b097c4dce6",
    R"lua(-- prelude.lua: shared by every ratelimit script. cmake/embed_lua.cmake prepends it to each
-- algorithm's script, so each EVALSHA body is self-contained.
--
-- Why big integers: Redis Lua numbers are IEEE doubles, exact only below 2^53. Times here are
-- whole microseconds (below 2^53 for every clock reading up to 2^62 ns), but products such as
-- (time in ns) x (tokens per period) reach about 2^93. Those are held as exact non-negative
-- integers in base 10^7 limbs, least significant first: a limb product is below 10^14 and
-- every intermediate below 2^53, so nothing ever rounds. Only TTLs use approximations, and
-- they round up.

local BASE = 10000000

-- A whole number below 2^53 as a decimal string. Never pass a bare number to redis.call:
-- Redis formats it with 14 significant digits.
local function fmt(x)
  return string.format('%.0f', x)
end

local function trim(a)
  while #a > 1 and a[#a] == 0 do a[#a] = nil end
  return a
end

-- A decimal string of digits (no sign) as a big integer.
local function bn(s)
  local r, i = {}, #s
  while i >= 1 do
    local j = i - 6
    if j < 1 then j = 1 end
    r[#r + 1] = tonumber(string.sub(s, j, i))
    i = j - 1
  end
  if #r == 0 then r[1] = 0 end
  return trim(r)
end

-- A whole number below 2^53 as a big integer.
local function bn_int(x)
  local r = {}
  repeat
    local d = x % BASE
    r[#r + 1] = d
    x = (x - d) / BASE
  until x == 0
  return r
end

-- -1, 0 or 1 as a < b, a = b, a > b.
local function bn_cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local function bn_add(a, b)
  local r, carry = {}, 0
  for i = 1, math.max(#a, #b) do
    local s = (a[i] or 0) + (b[i] or 0) + carry
    if s >= BASE then
      r[i], carry = s - BASE, 1
    else
      r[i], carry = s, 0
    end
  end
  if carry > 0 then r[#r + 1] = carry end
  return r
end

-- a - b, for a >= b.
local function bn_sub(a, b)
  local r, borrow = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - borrow
    if s < 0 then
      r[i], borrow = s + BASE, 1
    else
      r[i], borrow = s, 0
    end
  end
  return trim(r)
end

local function bn_mul(a, b)
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local carry = 0
    for j = 1, #b do
      local cur = r[i + j - 1] + a[i] * b[j] + carry
      local low = cur % BASE
      r[i + j - 1] = low
      carry = (cur - low) / BASE
    end
    local k = i + #b
    while carry > 0 do
      local cur = r[k] + carry
      local low = cur % BASE
      r[k] = low
      carry = (cur - low) / BASE
      k = k + 1
    end
  end
  return trim(r)
end

local function bn_str(a)
  local parts = { string.format('%d', a[#a]) }
  for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format('%07d', a[i]) end
  return table.concat(parts)
end

-- The nearest double (relative error about 2^-52): for TTLs and estimates only.
local function bn_approx(a)
  local x = 0
  for i = #a, 1, -1 do x = x * BASE + a[i] end
  return x
end

-- floor(a / d) as a number (the quotient must be below 2^53), d >= 1 given exactly (d_bn) and
-- as a double (d_approx): estimated in floating point, then corrected by exact products.
local function bn_floor_div(a, d_bn, d_approx)
  local q = math.floor(bn_approx(a) / d_approx)
  if q < 0 then q = 0 end
  while q > 0 and bn_cmp(bn_mul(bn_int(q), d_bn), a) > 0 do q = q - 1 end
  while bn_cmp(bn_mul(bn_int(q + 1), d_bn), a) <= 0 do q = q + 1 end
  return q
end

-- The decision's time in whole microseconds: the caller's (arg) or, when arg is empty, Redis's
-- own clock (TIME), so that hosts whose clocks disagree still share one time line. Scripts that
-- read TIME and then write need effects replication: the default since Redis 5; asked for
-- explicitly on older servers.
local function now_us(arg)
  if arg ~= '' then return tonumber(arg) end
  if redis.replicate_commands then redis.replicate_commands() end
  local tm = redis.call('TIME')
  return tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end

-- A PEXPIRE argument: ceil(ns / 10^6) ms, plus 1 ms that absorbs the estimate's rounding, plus
-- the caller's margin (ms) for clocks that disagree.
local function ttl_ms(ns_approx, margin_ms)
  return fmt(math.ceil(ns_approx / 1000000) + 1 + margin_ms)
end

-- Microseconds (a number) to nanoseconds (a big integer).
local function us_to_ns(t)
  return bn_mul(bn_int(t), bn_int(1000))
end

-- leaky_bucket.lua: one leaky bucket decision, atomically (the twin of LeakyBucketModel).
--
-- Rule (a shaping queue, fluid model): the level L, work admitted and not yet leaked, starts at
-- 0 and drains at r. A request of n is admitted iff L + n <= Q and (when the caller bounds its
-- wait) its delay L / r is within max_wait; it waits delay = L / r, then L <- L + n.
-- Kept as GCRA (ITU-T I.371): one timestamp `at`, the instant the queue is empty, scaled by
-- `count` (units per period, reduced) so fractions of a nanosecond stay exact. With the backlog
-- D = max(0, at - t) = L x period: admit iff D + n*period <= Q*period and
-- ceil(D / count) <= max_wait (<=> D <= max_wait x count), then at <- max(at, t) + n*period.
--
-- KEYS[1]  hash: at   = the instant the queue is empty, ns x count (decimal)
--                last = latest admitted time, us (a request stamped earlier is decided then)
-- ARGV[1]  now, whole us; '' to read Redis TIME instead
-- ARGV[2]  count: units leaked per period, reduced by gcd(count, period)
-- ARGV[3]  n x period (decimal): the request's size in 1/count ns
-- ARGV[4]  Q x period (decimal): a full queue in the same unit
-- ARGV[5]  '1' for a peek (changes nothing), '0' otherwise
-- ARGV[6]  TTL margin, ms
-- ARGV[7]  max_wait x count (decimal, in 1/count ns); '' for no bound; '-' when max_wait < 0
-- Returns  { admitted (0|1), decision time (us, decimal), at before the decision (decimal) }:
--          the client derives remaining, retry_after, reset_after and delay exactly.
-- TTL      the time until the queue is empty (+1 ms, + margin).

local state = redis.call('HMGET', KEYS[1], 'at', 'last')
local t = now_us(ARGV[1])
local last = tonumber(state[2]) or 0
if last > t then t = last end

local count = tonumber(ARGV[2])
local at = bn(state[1] or '0')
local scaled_t = bn_mul(us_to_ns(t), bn_int(count))
local ahead = bn_cmp(at, scaled_t) > 0
local backlog = ahead and bn_sub(at, scaled_t) or bn_int(0)
local size = bn(ARGV[3])
local needed = bn_add(backlog, size)
local admitted = bn_cmp(needed, bn(ARGV[4])) <= 0
if admitted and ARGV[7] ~= '' then
  admitted = ARGV[7] ~= '-' and bn_cmp(backlog, bn(ARGV[7])) <= 0
end

if admitted and ARGV[5] ~= '1' then
  local new_at = bn_add(ahead and at or scaled_t, size)
  redis.call('HSET', KEYS[1], 'at', bn_str(new_at), 'last', fmt(t))
  redis.call('PEXPIRE', KEYS[1], ttl_ms(bn_approx(needed) / count, tonumber(ARGV[6])))
end
return { admitted and 1 or 0, fmt(t), bn_str(at) }
)lua"};

inline constexpr RedisScript fixed_window{
    "fixed_window", "f0423b5e214cc39d335b7c2da287894a6b3f35df",
    R"lua(-- prelude.lua: shared by every ratelimit script. cmake/embed_lua.cmake prepends it to each
-- algorithm's script, so each EVALSHA body is self-contained.
--
-- Why big integers: Redis Lua numbers are IEEE doubles, exact only below 2^53. Times here are
-- whole microseconds (below 2^53 for every clock reading up to 2^62 ns), but products such as
-- (time in ns) x (tokens per period) reach about 2^93. Those are held as exact non-negative
-- integers in base 10^7 limbs, least significant first: a limb product is below 10^14 and
-- every intermediate below 2^53, so nothing ever rounds. Only TTLs use approximations, and
-- they round up.

local BASE = 10000000

-- A whole number below 2^53 as a decimal string. Never pass a bare number to redis.call:
-- Redis formats it with 14 significant digits.
local function fmt(x)
  return string.format('%.0f', x)
end

local function trim(a)
  while #a > 1 and a[#a] == 0 do a[#a] = nil end
  return a
end

-- A decimal string of digits (no sign) as a big integer.
local function bn(s)
  local r, i = {}, #s
  while i >= 1 do
    local j = i - 6
    if j < 1 then j = 1 end
    r[#r + 1] = tonumber(string.sub(s, j, i))
    i = j - 1
  end
  if #r == 0 then r[1] = 0 end
  return trim(r)
end

-- A whole number below 2^53 as a big integer.
local function bn_int(x)
  local r = {}
  repeat
    local d = x % BASE
    r[#r + 1] = d
    x = (x - d) / BASE
  until x == 0
  return r
end

-- -1, 0 or 1 as a < b, a = b, a > b.
local function bn_cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local function bn_add(a, b)
  local r, carry = {}, 0
  for i = 1, math.max(#a, #b) do
    local s = (a[i] or 0) + (b[i] or 0) + carry
    if s >= BASE then
      r[i], carry = s - BASE, 1
    else
      r[i], carry = s, 0
    end
  end
  if carry > 0 then r[#r + 1] = carry end
  return r
end

-- a - b, for a >= b.
local function bn_sub(a, b)
  local r, borrow = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - borrow
    if s < 0 then
      r[i], borrow = s + BASE, 1
    else
      r[i], borrow = s, 0
    end
  end
  return trim(r)
end

local function bn_mul(a, b)
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local carry = 0
    for j = 1, #b do
      local cur = r[i + j - 1] + a[i] * b[j] + carry
      local low = cur % BASE
      r[i + j - 1] = low
      carry = (cur - low) / BASE
    end
    local k = i + #b
    while carry > 0 do
      local cur = r[k] + carry
      local low = cur % BASE
      r[k] = low
      carry = (cur - low) / BASE
      k = k + 1
    end
  end
  return trim(r)
end

local function bn_str(a)
  local parts = { string.format('%d', a[#a]) }
  for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format('%07d', a[i]) end
  return table.concat(parts)
end

-- The nearest double (relative error about 2^-52): for TTLs and estimates only.
local function bn_approx(a)
  local x = 0
  for i = #a, 1, -1 do x = x * BASE + a[i] end
  return x
end

-- floor(a / d) as a number (the quotient must be below 2^53), d >= 1 given exactly (d_bn) and
-- as a double (d_approx): estimated in floating point, then corrected by exact products.
local function bn_floor_div(a, d_bn, d_approx)
  local q = math.floor(bn_approx(a) / d_approx)
  if q < 0 then q = 0 end
  while q > 0 and bn_cmp(bn_mul(bn_int(q), d_bn), a) > 0 do q = q - 1 end
  while bn_cmp(bn_mul(bn_int(q + 1), d_bn), a) <= 0 do q = q + 1 end
  return q
end

-- The decision's time in whole microseconds: the caller's (arg) or, when arg is empty, Redis's
-- own clock (TIME), so that hosts whose clocks disagree still share one time line. Scripts that
-- read TIME and then write need effects replication: the default since Redis 5; asked for
-- explicitly on older servers.
local function now_us(arg)
  if arg ~= '' then return tonumber(arg) end
  if redis.replicate_commands then redis.replicate_commands() end
  local tm = redis.call('TIME')
  return tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end

-- A PEXPIRE argument: ceil(ns / 10^6) ms, plus 1 ms that absorbs the estimate's rounding, plus
-- the caller's margin (ms) for clocks that disagree.
local function ttl_ms(ns_approx, margin_ms)
  return fmt(math.ceil(ns_approx / 1000000) + 1 + margin_ms)
end

-- Microseconds (a number) to nanoseconds (a big integer).
local function us_to_ns(t)
  return bn_mul(bn_int(t), bn_int(1000))
end

-- fixed_window.lua: one fixed window decision, atomically (the twin of FixedWindowModel).
--
-- Rule: window k = floor(t / W), aligned to the clock's epoch; c counts the requests admitted in
-- window k (0 if the key last counted in an earlier window). Admit n iff c + n <= N, then
-- c <- c + n.
--
-- KEYS[1]  hash: last  = latest admitted time, us (its window is the counted one; a request
--                        stamped earlier is decided at that time)
--                count = requests admitted in last's window
-- ARGV[1]  now, whole us; '' to read Redis TIME instead
-- ARGV[2]  W, ns (decimal; any whole ns from 1 ms to 366 days)
-- ARGV[3]  n, the cost (a peek dry-runs the same cost)
-- ARGV[4]  N, the limit
-- ARGV[5]  '1' for a peek (changes nothing), '0' otherwise
-- ARGV[6]  TTL margin, ms
-- Returns  { admitted (0|1), decision time (us, decimal), c before the decision }
-- TTL      until the end of window k, (k + 1) W - t (+1 ms, + margin).

local state = redis.call('HMGET', KEYS[1], 'last', 'count')
local t = now_us(ARGV[1])
local last = tonumber(state[1]) or 0
if last > t then t = last end

local w = bn(ARGV[2])
local w_approx = tonumber(ARGV[2])
local t_ns = us_to_ns(t)
local k = bn_floor_div(t_ns, w, w_approx)
local c = 0
if state[2] and bn_floor_div(us_to_ns(last), w, w_approx) == k then c = tonumber(state[2]) end

local n = tonumber(ARGV[3])
local admitted = c + n <= tonumber(ARGV[4])
if admitted and ARGV[5] ~= '1' then
  redis.call('HSET', KEYS[1], 'last', fmt(t), 'count', fmt(c + n))
  local to_end = bn_sub(bn_mul(bn_int(k + 1), w), t_ns)
  redis.call('PEXPIRE', KEYS[1], ttl_ms(bn_approx(to_end), tonumber(ARGV[6])))
end
return { admitted and 1 or 0, fmt(t), c }
)lua"};

inline constexpr RedisScript sliding_log{
    "sliding_log", "c3802ee700612b9df6445d8d376659844231f366",
    R"lua(-- prelude.lua: shared by every ratelimit script. cmake/embed_lua.cmake prepends it to each
-- algorithm's script, so each EVALSHA body is self-contained.
--
-- Why big integers: Redis Lua numbers are IEEE doubles, exact only below 2^53. Times here are
-- whole microseconds (below 2^53 for every clock reading up to 2^62 ns), but products such as
-- (time in ns) x (tokens per period) reach about 2^93. Those are held as exact non-negative
-- integers in base 10^7 limbs, least significant first: a limb product is below 10^14 and
-- every intermediate below 2^53, so nothing ever rounds. Only TTLs use approximations, and
-- they round up.

local BASE = 10000000

-- A whole number below 2^53 as a decimal string. Never pass a bare number to redis.call:
-- Redis formats it with 14 significant digits.
local function fmt(x)
  return string.format('%.0f', x)
end

local function trim(a)
  while #a > 1 and a[#a] == 0 do a[#a] = nil end
  return a
end

-- A decimal string of digits (no sign) as a big integer.
local function bn(s)
  local r, i = {}, #s
  while i >= 1 do
    local j = i - 6
    if j < 1 then j = 1 end
    r[#r + 1] = tonumber(string.sub(s, j, i))
    i = j - 1
  end
  if #r == 0 then r[1] = 0 end
  return trim(r)
end

-- A whole number below 2^53 as a big integer.
local function bn_int(x)
  local r = {}
  repeat
    local d = x % BASE
    r[#r + 1] = d
    x = (x - d) / BASE
  until x == 0
  return r
end

-- -1, 0 or 1 as a < b, a = b, a > b.
local function bn_cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local function bn_add(a, b)
  local r, carry = {}, 0
  for i = 1, math.max(#a, #b) do
    local s = (a[i] or 0) + (b[i] or 0) + carry
    if s >= BASE then
      r[i], carry = s - BASE, 1
    else
      r[i], carry = s, 0
    end
  end
  if carry > 0 then r[#r + 1] = carry end
  return r
end

-- a - b, for a >= b.
local function bn_sub(a, b)
  local r, borrow = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - borrow
    if s < 0 then
      r[i], borrow = s + BASE, 1
    else
      r[i], borrow = s, 0
    end
  end
  return trim(r)
end

local function bn_mul(a, b)
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local carry = 0
    for j = 1, #b do
      local cur = r[i + j - 1] + a[i] * b[j] + carry
      local low = cur % BASE
      r[i + j - 1] = low
      carry = (cur - low) / BASE
    end
    local k = i + #b
    while carry > 0 do
      local cur = r[k] + carry
      local low = cur % BASE
      r[k] = low
      carry = (cur - low) / BASE
      k = k + 1
    end
  end
  return trim(r)
end

local function bn_str(a)
  local parts = { string.format('%d', a[#a]) }
  for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format('%07d', a[i]) end
  return table.concat(parts)
end

-- The nearest double (relative error about 2^-52): for TTLs and estimates only.
local function bn_approx(a)
  local x = 0
  for i = #a, 1, -1 do x = x * BASE + a[i] end
  return x
end

-- floor(a / d) as a number (the quotient must be below 2^53), d >= 1 given exactly (d_bn) and
-- as a double (d_approx): estimated in floating point, then corrected by exact products.
local function bn_floor_div(a, d_bn, d_approx)
  local q = math.floor(bn_approx(a) / d_approx)
  if q < 0 then q = 0 end
  while q > 0 and bn_cmp(bn_mul(bn_int(q), d_bn), a) > 0 do q = q - 1 end
  while bn_cmp(bn_mul(bn_int(q + 1), d_bn), a) <= 0 do q = q + 1 end
  return q
end

-- The decision's time in whole microseconds: the caller's (arg) or, when arg is empty, Redis's
-- own clock (TIME), so that hosts whose clocks disagree still share one time line. Scripts that
-- read TIME and then write need effects replication: the default since Redis 5; asked for
-- explicitly on older servers.
local function now_us(arg)
  if arg ~= '' then return tonumber(arg) end
  if redis.replicate_commands then redis.replicate_commands() end
  local tm = redis.call('TIME')
  return tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end

-- A PEXPIRE argument: ceil(ns / 10^6) ms, plus 1 ms that absorbs the estimate's rounding, plus
-- the caller's margin (ms) for clocks that disagree.
local function ttl_ms(ns_approx, margin_ms)
  return fmt(math.ceil(ns_approx / 1000000) + 1 + margin_ms)
end

-- Microseconds (a number) to nanoseconds (a big integer).
local function us_to_ns(t)
  return bn_mul(bn_int(t), bn_int(1000))
end

-- sliding_log.lua: one sliding log decision, atomically (the twin of SlidingLogModel).
--
-- Rule: the log holds the time of every admitted unit; at t the window is (t - W, t], so an
-- entry stamped exactly t - W no longer counts. Admit n iff |log| + n <= N, then log n units at
-- t; denied requests are not logged. When denied, the request fits again once the
-- (|log| + n - N)-th oldest unit has left the window.
-- Stored as a sorted set: one member per admitted request, score = its time (us), member =
-- "<seq>:<n>" where seq comes from a per-key counter, so requests admitted in the same
-- microsecond by different instances stay distinct. A running total of the set's units sits
-- beside it.
-- In whole us, an entry at e is live iff e*1000 > t*1000 - W, i.e. e >= t - floor((W - 1) / 1000).
--
-- KEYS[1]  sorted set: the log (score = time in us, member = "<seq>:<units>")
-- KEYS[2]  hash: last  = latest admitted time, us (a request stamped earlier is decided then)
--                total = units in the sorted set (expired ones included until pruned)
--                seq   = the member counter
-- ARGV[1]  now, whole us; '' to read Redis TIME instead
-- ARGV[2]  floor((W - 1) / 1000): the window's reach back from t, us
-- ARGV[3]  n, the cost (a peek dry-runs the same cost)
-- ARGV[4]  N, the limit
-- ARGV[5]  '1' for a peek (changes nothing), '0' otherwise
-- ARGV[6]  TTL margin, ms
-- ARGV[7]  W, ns (decimal)
-- Returns  { admitted (0|1), decision time (us, decimal), live units before the decision,
--            newest entry's time (us, -1 if none), the time of the (live + n - N)-th oldest
--            unit (us, -1 unless that is what a denial waits for) }
-- TTL      both keys: until the newest entry leaves the window (+1 ms, + margin).

local meta = redis.call('HMGET', KEYS[2], 'last', 'total')
local t = now_us(ARGV[1])
local last = tonumber(meta[1]) or 0
if last > t then t = last end
local live = tonumber(meta[2]) or 0  -- becomes: units still in the window at t
local w_ns = tonumber(ARGV[7])
local margin = tonumber(ARGV[6])

local function units(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

-- Units that have left the window at t. They are deleted only when a request is admitted:
-- `last` then becomes t, and no later decision can look back before it. A peek or a denial
-- must leave them, since a later request stamped before t (but after last) still sees them.
local cut = fmt(t - tonumber(ARGV[2]) - 1)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cut)
for i = 1, #expired do live = live - units(expired[i]) end

local newest = -1
if live > 0 then newest = tonumber(redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]) end

local n, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local to_drop = live + n - limit
local admitted = n <= limit and to_drop <= 0
local target = -1
if n <= limit and to_drop > 0 then
  local seen, start = 0, #expired  -- the expired entries rank first: skip them
  while target < 0 do
    local page = redis.call('ZRANGE', KEYS[1], start, start + 127, 'WITHSCORES')
    if #page == 0 then break end
    for i = 1, #page, 2 do
      seen = seen + units(page[i])
      if seen >= to_drop then
        target = tonumber(page[i + 1])
        break
      end
    end
    start = start + 128
  end
end

if admitted and ARGV[5] ~= '1' then
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cut) end
  local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
  redis.call('ZADD', KEYS[1], fmt(t), fmt(seq) .. ':' .. fmt(n))
  redis.call('HSET', KEYS[2], 'last', fmt(t), 'total', fmt(live + n))
  local ttl = ttl_ms(w_ns, margin)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return { admitted and 1 or 0, fmt(t), live, fmt(newest), fmt(target) }
)lua"};

inline constexpr RedisScript sliding_counter{
    "sliding_counter", "7de8883dca6fa81dbddefc239c92736935a86247",
    R"lua(-- prelude.lua: shared by every ratelimit script. cmake/embed_lua.cmake prepends it to each
-- algorithm's script, so each EVALSHA body is self-contained.
--
-- Why big integers: Redis Lua numbers are IEEE doubles, exact only below 2^53. Times here are
-- whole microseconds (below 2^53 for every clock reading up to 2^62 ns), but products such as
-- (time in ns) x (tokens per period) reach about 2^93. Those are held as exact non-negative
-- integers in base 10^7 limbs, least significant first: a limb product is below 10^14 and
-- every intermediate below 2^53, so nothing ever rounds. Only TTLs use approximations, and
-- they round up.

local BASE = 10000000

-- A whole number below 2^53 as a decimal string. Never pass a bare number to redis.call:
-- Redis formats it with 14 significant digits.
local function fmt(x)
  return string.format('%.0f', x)
end

local function trim(a)
  while #a > 1 and a[#a] == 0 do a[#a] = nil end
  return a
end

-- A decimal string of digits (no sign) as a big integer.
local function bn(s)
  local r, i = {}, #s
  while i >= 1 do
    local j = i - 6
    if j < 1 then j = 1 end
    r[#r + 1] = tonumber(string.sub(s, j, i))
    i = j - 1
  end
  if #r == 0 then r[1] = 0 end
  return trim(r)
end

-- A whole number below 2^53 as a big integer.
local function bn_int(x)
  local r = {}
  repeat
    local d = x % BASE
    r[#r + 1] = d
    x = (x - d) / BASE
  until x == 0
  return r
end

-- -1, 0 or 1 as a < b, a = b, a > b.
local function bn_cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local function bn_add(a, b)
  local r, carry = {}, 0
  for i = 1, math.max(#a, #b) do
    local s = (a[i] or 0) + (b[i] or 0) + carry
    if s >= BASE then
      r[i], carry = s - BASE, 1
    else
      r[i], carry = s, 0
    end
  end
  if carry > 0 then r[#r + 1] = carry end
  return r
end

-- a - b, for a >= b.
local function bn_sub(a, b)
  local r, borrow = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - borrow
    if s < 0 then
      r[i], borrow = s + BASE, 1
    else
      r[i], borrow = s, 0
    end
  end
  return trim(r)
end

local function bn_mul(a, b)
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local carry = 0
    for j = 1, #b do
      local cur = r[i + j - 1] + a[i] * b[j] + carry
      local low = cur % BASE
      r[i + j - 1] = low
      carry = (cur - low) / BASE
    end
    local k = i + #b
    while carry > 0 do
      local cur = r[k] + carry
      local low = cur % BASE
      r[k] = low
      carry = (cur - low) / BASE
      k = k + 1
    end
  end
  return trim(r)
end

local function bn_str(a)
  local parts = { string.format('%d', a[#a]) }
  for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format('%07d', a[i]) end
  return table.concat(parts)
end

-- The nearest double (relative error about 2^-52): for TTLs and estimates only.
local function bn_approx(a)
  local x = 0
  for i = #a, 1, -1 do x = x * BASE + a[i] end
  return x
end

-- floor(a / d) as a number (the quotient must be below 2^53), d >= 1 given exactly (d_bn) and
-- as a double (d_approx): estimated in floating point, then corrected by exact products.
local function bn_floor_div(a, d_bn, d_approx)
  local q = math.floor(bn_approx(a) / d_approx)
  if q < 0 then q = 0 end
  while q > 0 and bn_cmp(bn_mul(bn_int(q), d_bn), a) > 0 do q = q - 1 end
  while bn_cmp(bn_mul(bn_int(q + 1), d_bn), a) <= 0 do q = q + 1 end
  return q
end

-- The decision's time in whole microseconds: the caller's (arg) or, when arg is empty, Redis's
-- own clock (TIME), so that hosts whose clocks disagree still share one time line. Scripts that
-- read TIME and then write need effects replication: the default since Redis 5; asked for
-- explicitly on older servers.
local function now_us(arg)
  if arg ~= '' then return tonumber(arg) end
  if redis.replicate_commands then redis.replicate_commands() end
  local tm = redis.call('TIME')
  return tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end

-- A PEXPIRE argument: ceil(ns / 10^6) ms, plus 1 ms that absorbs the estimate's rounding, plus
-- the caller's margin (ms) for clocks that disagree.
local function ttl_ms(ns_approx, margin_ms)
  return fmt(math.ceil(ns_approx / 1000000) + 1 + margin_ms)
end

-- Microseconds (a number) to nanoseconds (a big integer).
local function us_to_ns(t)
  return bn_mul(bn_int(t), bn_int(1000))
end

-- sliding_counter.lua: one sliding window counter decision, atomically (the twin of
-- SlidingCounterModel).
--
-- Rule: windows as the fixed window; c counts window k = floor(t / W), p counted window k - 1
-- (0 unless the key counted there), e = t - kW. The estimate E = c + p (W - e) / W; admit n iff
-- E + n <= N, decided exactly as (c + n) W + p (W - e) <= N W, then c <- c + n.
--
-- KEYS[1]  hash: last = latest admitted time, us (a request stamped earlier is decided then)
--                cur  = requests admitted in last's window
--                prev = requests admitted in the window before last's
-- ARGV[1]  now, whole us; '' to read Redis TIME instead
-- ARGV[2]  W, ns (decimal; any whole ns from 1 ms to 366 days)
-- ARGV[3]  n, the cost (a peek dry-runs the same cost)
-- ARGV[4]  N, the limit
-- ARGV[5]  '1' for a peek (changes nothing), '0' otherwise
-- ARGV[6]  TTL margin, ms
-- Returns  { admitted (0|1), decision time (us, decimal), c, p } as seen from window k, before
--          the decision: the client derives remaining, retry_after and reset_after exactly.
-- TTL      until both counts have left the estimate, (k + 2) W - t (+1 ms, + margin).

local state = redis.call('HMGET', KEYS[1], 'last', 'cur', 'prev')
local t = now_us(ARGV[1])
local last = tonumber(state[1]) or 0
if last > t then t = last end

local w = bn(ARGV[2])
local w_approx = tonumber(ARGV[2])
local t_ns = us_to_ns(t)
local k = bn_floor_div(t_ns, w, w_approx)
local c, p = 0, 0
if state[1] then
  local k_last = bn_floor_div(us_to_ns(last), w, w_approx)
  if k == k_last then
    c, p = tonumber(state[2]) or 0, tonumber(state[3]) or 0
  elseif k == k_last + 1 then
    p = tonumber(state[2]) or 0
  end
end

local n = tonumber(ARGV[3])
local e = bn_sub(t_ns, bn_mul(bn_int(k), w))
local lhs = bn_add(bn_mul(bn_int(c + n), w), bn_mul(bn_int(p), bn_sub(w, e)))
local admitted = bn_cmp(lhs, bn_mul(bn(ARGV[4]), w)) <= 0
if admitted and ARGV[5] ~= '1' then
  redis.call('HSET', KEYS[1], 'last', fmt(t), 'cur', fmt(c + n), 'prev', fmt(p))
  local to_clear = bn_sub(bn_mul(bn_int(k + 2), w), t_ns)
  redis.call('PEXPIRE', KEYS[1], ttl_ms(bn_approx(to_clear), tonumber(ARGV[6])))
end
return { admitted and 1 or 0, fmt(t), c, p }
)lua"};

inline constexpr RedisScript rules{
    "rules", "3b780c9f806cc880a3a0e2b81d67b914094e0da4",
    R"lua(-- prelude.lua: shared by every ratelimit script. cmake/embed_lua.cmake prepends it to each
-- algorithm's script, so each EVALSHA body is self-contained.
--
-- Why big integers: Redis Lua numbers are IEEE doubles, exact only below 2^53. Times here are
-- whole microseconds (below 2^53 for every clock reading up to 2^62 ns), but products such as
-- (time in ns) x (tokens per period) reach about 2^93. Those are held as exact non-negative
-- integers in base 10^7 limbs, least significant first: a limb product is below 10^14 and
-- every intermediate below 2^53, so nothing ever rounds. Only TTLs use approximations, and
-- they round up.

local BASE = 10000000

-- A whole number below 2^53 as a decimal string. Never pass a bare number to redis.call:
-- Redis formats it with 14 significant digits.
local function fmt(x)
  return string.format('%.0f', x)
end

local function trim(a)
  while #a > 1 and a[#a] == 0 do a[#a] = nil end
  return a
end

-- A decimal string of digits (no sign) as a big integer.
local function bn(s)
  local r, i = {}, #s
  while i >= 1 do
    local j = i - 6
    if j < 1 then j = 1 end
    r[#r + 1] = tonumber(string.sub(s, j, i))
    i = j - 1
  end
  if #r == 0 then r[1] = 0 end
  return trim(r)
end

-- A whole number below 2^53 as a big integer.
local function bn_int(x)
  local r = {}
  repeat
    local d = x % BASE
    r[#r + 1] = d
    x = (x - d) / BASE
  until x == 0
  return r
end

-- -1, 0 or 1 as a < b, a = b, a > b.
local function bn_cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local function bn_add(a, b)
  local r, carry = {}, 0
  for i = 1, math.max(#a, #b) do
    local s = (a[i] or 0) + (b[i] or 0) + carry
    if s >= BASE then
      r[i], carry = s - BASE, 1
    else
      r[i], carry = s, 0
    end
  end
  if carry > 0 then r[#r + 1] = carry end
  return r
end

-- a - b, for a >= b.
local function bn_sub(a, b)
  local r, borrow = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - borrow
    if s < 0 then
      r[i], borrow = s + BASE, 1
    else
      r[i], borrow = s, 0
    end
  end
  return trim(r)
end

local function bn_mul(a, b)
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local carry = 0
    for j = 1, #b do
      local cur = r[i + j - 1] + a[i] * b[j] + carry
      local low = cur % BASE
      r[i + j - 1] = low
      carry = (cur - low) / BASE
    end
    local k = i + #b
    while carry > 0 do
      local cur = r[k] + carry
      local low = cur % BASE
      r[k] = low
      carry = (cur - low) / BASE
      k = k + 1
    end
  end
  return trim(r)
end

local function bn_str(a)
  local parts = { string.format('%d', a[#a]) }
  for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format('%07d', a[i]) end
  return table.concat(parts)
end

-- The nearest double (relative error about 2^-52): for TTLs and estimates only.
local function bn_approx(a)
  local x = 0
  for i = #a, 1, -1 do x = x * BASE + a[i] end
  return x
end

-- floor(a / d) as a number (the quotient must be below 2^53), d >= 1 given exactly (d_bn) and
-- as a double (d_approx): estimated in floating point, then corrected by exact products.
local function bn_floor_div(a, d_bn, d_approx)
  local q = math.floor(bn_approx(a) / d_approx)
  if q < 0 then q = 0 end
  while q > 0 and bn_cmp(bn_mul(bn_int(q), d_bn), a) > 0 do q = q - 1 end
  while bn_cmp(bn_mul(bn_int(q + 1), d_bn), a) <= 0 do q = q + 1 end
  return q
end

-- The decision's time in whole microseconds: the caller's (arg) or, when arg is empty, Redis's
-- own clock (TIME), so that hosts whose clocks disagree still share one time line. Scripts that
-- read TIME and then write need effects replication: the default since Redis 5; asked for
-- explicitly on older servers.
local function now_us(arg)
  if arg ~= '' then return tonumber(arg) end
  if redis.replicate_commands then redis.replicate_commands() end
  local tm = redis.call('TIME')
  return tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end

-- A PEXPIRE argument: ceil(ns / 10^6) ms, plus 1 ms that absorbs the estimate's rounding, plus
-- the caller's margin (ms) for clocks that disagree.
local function ttl_ms(ns_approx, margin_ms)
  return fmt(math.ceil(ns_approx / 1000000) + 1 + margin_ms)
end

-- Microseconds (a number) to nanoseconds (a big integer).
local function us_to_ns(t)
  return bn_mul(bn_int(t), bn_int(1000))
end


local function algo_token_bucket(KEYS, ARGV)
-- token_bucket.lua: one token bucket decision, atomically (the twin of TokenBucketModel).
--
-- Rule: tokens T start at B; at each decision T <- min(B, T + r * elapsed); a request of n
-- tokens is admitted iff T >= n, then T <- T - n.
-- Kept as GCRA (ITU-T I.371, virtual scheduling): one timestamp `at`, the instant the bucket is
-- full again, scaled by `count` (tokens per period, reduced) so fractions of a nanosecond stay
-- exact. With the backlog D = max(0, at - t): admit iff D + n*period <= B*period, then
-- at <- max(at, t) + n*period. All of D, at and t*count are in 1/count ns (big integers).
--
-- KEYS[1]  hash: at   = theoretical arrival time, ns x count (decimal)
--                last = latest admitted time, us (a request stamped earlier is decided then)
-- ARGV[1]  now, whole us; '' to read Redis TIME instead
-- ARGV[2]  count: tokens per period, reduced by gcd(count, period)
-- ARGV[3]  n x period (decimal): the request's cost in 1/count ns
-- ARGV[4]  B x period (decimal): a full bucket in the same unit
-- ARGV[5]  '1' for a peek (changes nothing), '0' otherwise
-- ARGV[6]  TTL margin, ms
-- Returns  { admitted (0|1), decision time (us, decimal), at before the decision (decimal) }:
--          the client derives remaining, retry_after and reset_after from these exactly.
-- TTL      the time until the bucket is full again (+1 ms, + margin): after that the key's
--          state decides exactly like a fresh key.

local state = redis.call('HMGET', KEYS[1], 'at', 'last')
local t = now_us(ARGV[1])
local last = tonumber(state[2]) or 0
if last > t then t = last end

local count = tonumber(ARGV[2])
local at = bn(state[1] or '0')
local scaled_t = bn_mul(us_to_ns(t), bn_int(count))
local ahead = bn_cmp(at, scaled_t) > 0
local backlog = ahead and bn_sub(at, scaled_t) or bn_int(0)
local cost = bn(ARGV[3])
local needed = bn_add(backlog, cost)
local admitted = bn_cmp(needed, bn(ARGV[4])) <= 0

if admitted and ARGV[5] ~= '1' then
  local new_at = bn_add(ahead and at or scaled_t, cost)
  redis.call('HSET', KEYS[1], 'at', bn_str(new_at), 'last', fmt(t))
  redis.call('PEXPIRE', KEYS[1], ttl_ms(bn_approx(needed) / count, tonumber(ARGV[6])))
end
return { admitted and 1 or 0, fmt(t), bn_str(at) }

end

local function algo_leaky_bucket(KEYS, ARGV)
-- leaky_bucket.lua: one leaky bucket decision, atomically (the twin of LeakyBucketModel).
--
-- Rule (a shaping queue, fluid model): the level L, work admitted and not yet leaked, starts at
-- 0 and drains at r. A request of n is admitted iff L + n <= Q and (when the caller bounds its
-- wait) its delay L / r is within max_wait; it waits delay = L / r, then L <- L + n.
-- Kept as GCRA (ITU-T I.371): one timestamp `at`, the instant the queue is empty, scaled by
-- `count` (units per period, reduced) so fractions of a nanosecond stay exact. With the backlog
-- D = max(0, at - t) = L x period: admit iff D + n*period <= Q*period and
-- ceil(D / count) <= max_wait (<=> D <= max_wait x count), then at <- max(at, t) + n*period.
--
-- KEYS[1]  hash: at   = the instant the queue is empty, ns x count (decimal)
--                last = latest admitted time, us (a request stamped earlier is decided then)
-- ARGV[1]  now, whole us; '' to read Redis TIME instead
-- ARGV[2]  count: units leaked per period, reduced by gcd(count, period)
-- ARGV[3]  n x period (decimal): the request's size in 1/count ns
-- ARGV[4]  Q x period (decimal): a full queue in the same unit
-- ARGV[5]  '1' for a peek (changes nothing), '0' otherwise
-- ARGV[6]  TTL margin, ms
-- ARGV[7]  max_wait x count (decimal, in 1/count ns); '' for no bound; '-' when max_wait < 0
-- Returns  { admitted (0|1), decision time (us, decimal), at before the decision (decimal) }:
--          the client derives remaining, retry_after, reset_after and delay exactly.
-- TTL      the time until the queue is empty (+1 ms, + margin).

local state = redis.call('HMGET', KEYS[1], 'at', 'last')
local t = now_us(ARGV[1])
local last = tonumber(state[2]) or 0
if last > t then t = last end

local count = tonumber(ARGV[2])
local at = bn(state[1] or '0')
local scaled_t = bn_mul(us_to_ns(t), bn_int(count))
local ahead = bn_cmp(at, scaled_t) > 0
local backlog = ahead and bn_sub(at, scaled_t) or bn_int(0)
local size = bn(ARGV[3])
local needed = bn_add(backlog, size)
local admitted = bn_cmp(needed, bn(ARGV[4])) <= 0
if admitted and ARGV[7] ~= '' then
  admitted = ARGV[7] ~= '-' and bn_cmp(backlog, bn(ARGV[7])) <= 0
end

if admitted and ARGV[5] ~= '1' then
  local new_at = bn_add(ahead and at or scaled_t, size)
  redis.call('HSET', KEYS[1], 'at', bn_str(new_at), 'last', fmt(t))
  redis.call('PEXPIRE', KEYS[1], ttl_ms(bn_approx(needed) / count, tonumber(ARGV[6])))
end
return { admitted and 1 or 0, fmt(t), bn_str(at) }

end

local function algo_fixed_window(KEYS, ARGV)
-- fixed_window.lua: one fixed window decision, atomically (the twin of FixedWindowModel).
--
-- Rule: window k = floor(t / W), aligned to the clock's epoch; c counts the requests admitted in
-- window k (0 if the key last counted in an earlier window). Admit n iff c + n <= N, then
-- c <- c + n.
--
-- KEYS[1]  hash: last  = latest admitted time, us (its window is the counted one; a request
--                        stamped earlier is decided at that time)
--                count = requests admitted in last's window
-- ARGV[1]  now, whole us; '' to read Redis TIME instead
-- ARGV[2]  W, ns (decimal; any whole ns from 1 ms to 366 days)
-- ARGV[3]  n, the cost (a peek dry-runs the same cost)
-- ARGV[4]  N, the limit
-- ARGV[5]  '1' for a peek (changes nothing), '0' otherwise
-- ARGV[6]  TTL margin, ms
-- Returns  { admitted (0|1), decision time (us, decimal), c before the decision }
-- TTL      until the end of window k, (k + 1) W - t (+1 ms, + margin).

local state = redis.call('HMGET', KEYS[1], 'last', 'count')
local t = now_us(ARGV[1])
local last = tonumber(state[1]) or 0
if last > t then t = last end

local w = bn(ARGV[2])
local w_approx = tonumber(ARGV[2])
local t_ns = us_to_ns(t)
local k = bn_floor_div(t_ns, w, w_approx)
local c = 0
if state[2] and bn_floor_div(us_to_ns(last), w, w_approx) == k then c = tonumber(state[2]) end

local n = tonumber(ARGV[3])
local admitted = c + n <= tonumber(ARGV[4])
if admitted and ARGV[5] ~= '1' then
  redis.call('HSET', KEYS[1], 'last', fmt(t), 'count', fmt(c + n))
  local to_end = bn_sub(bn_mul(bn_int(k + 1), w), t_ns)
  redis.call('PEXPIRE', KEYS[1], ttl_ms(bn_approx(to_end), tonumber(ARGV[6])))
end
return { admitted and 1 or 0, fmt(t), c }

end

local function algo_sliding_log(KEYS, ARGV)
-- sliding_log.lua: one sliding log decision, atomically (the twin of SlidingLogModel).
--
-- Rule: the log holds the time of every admitted unit; at t the window is (t - W, t], so an
-- entry stamped exactly t - W no longer counts. Admit n iff |log| + n <= N, then log n units at
-- t; denied requests are not logged. When denied, the request fits again once the
-- (|log| + n - N)-th oldest unit has left the window.
-- Stored as a sorted set: one member per admitted request, score = its time (us), member =
-- "<seq>:<n>" where seq comes from a per-key counter, so requests admitted in the same
-- microsecond by different instances stay distinct. A running total of the set's units sits
-- beside it.
-- In whole us, an entry at e is live iff e*1000 > t*1000 - W, i.e. e >= t - floor((W - 1) / 1000).
--
-- KEYS[1]  sorted set: the log (score = time in us, member = "<seq>:<units>")
-- KEYS[2]  hash: last  = latest admitted time, us (a request stamped earlier is decided then)
--                total = units in the sorted set (expired ones included until pruned)
--                seq   = the member counter
-- ARGV[1]  now, whole us; '' to read Redis TIME instead
-- ARGV[2]  floor((W - 1) / 1000): the window's reach back from t, us
-- ARGV[3]  n, the cost (a peek dry-runs the same cost)
-- ARGV[4]  N, the limit
-- ARGV[5]  '1' for a peek (changes nothing), '0' otherwise
-- ARGV[6]  TTL margin, ms
-- ARGV[7]  W, ns (decimal)
-- Returns  { admitted (0|1), decision time (us, decimal), live units before the decision,
--            newest entry's time (us, -1 if none), the time of the (live + n - N)-th oldest
--            unit (us, -1 unless that is what a denial waits for) }
-- TTL      both keys: until the newest entry leaves the window (+1 ms, + margin).

local meta = redis.call('HMGET', KEYS[2], 'last', 'total')
local t = now_us(ARGV[1])
local last = tonumber(meta[1]) or 0
if last > t then t = last end
local live = tonumber(meta[2]) or 0  -- becomes: units still in the window at t
local w_ns = tonumber(ARGV[7])
local margin = tonumber(ARGV[6])

local function units(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

-- Units that have left the window at t. They are deleted only when a request is admitted:
-- `last` then becomes t, and no later decision can look back before it. A peek or a denial
-- must leave them, since a later request stamped before t (but after last) still sees them.
local cut = fmt(t - tonumber(ARGV[2]) - 1)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cut)
for i = 1, #expired do live = live - units(expired[i]) end

local newest = -1
if live > 0 then newest = tonumber(redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]) end

local n, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local to_drop = live + n - limit
local admitted = n <= limit and to_drop <= 0
local target = -1
if n <= limit and to_drop > 0 then
  local seen, start = 0, #expired  -- the expired entries rank first: skip them
  while target < 0 do
    local page = redis.call('ZRANGE', KEYS[1], start, start + 127, 'WITHSCORES')
    if #page == 0 then break end
    for i = 1, #page, 2 do
      seen = seen + units(page[i])
      if seen >= to_drop then
        target = tonumber(page[i + 1])
        break
      end
    end
    start = start + 128
  end
end

if admitted and ARGV[5] ~= '1' then
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cut) end
  local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
  redis.call('ZADD', KEYS[1], fmt(t), fmt(seq) .. ':' .. fmt(n))
  redis.call('HSET', KEYS[2], 'last', fmt(t), 'total', fmt(live + n))
  local ttl = ttl_ms(w_ns, margin)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return { admitted and 1 or 0, fmt(t), live, fmt(newest), fmt(target) }

end

local function algo_sliding_counter(KEYS, ARGV)
-- sliding_counter.lua: one sliding window counter decision, atomically (the twin of
-- SlidingCounterModel).
--
-- Rule: windows as the fixed window; c counts window k = floor(t / W), p counted window k - 1
-- (0 unless the key counted there), e = t - kW. The estimate E = c + p (W - e) / W; admit n iff
-- E + n <= N, decided exactly as (c + n) W + p (W - e) <= N W, then c <- c + n.
--
-- KEYS[1]  hash: last = latest admitted time, us (a request stamped earlier is decided then)
--                cur  = requests admitted in last's window
--                prev = requests admitted in the window before last's
-- ARGV[1]  now, whole us; '' to read Redis TIME instead
-- ARGV[2]  W, ns (decimal; any whole ns from 1 ms to 366 days)
-- ARGV[3]  n, the cost (a peek dry-runs the same cost)
-- ARGV[4]  N, the limit
-- ARGV[5]  '1' for a peek (changes nothing), '0' otherwise
-- ARGV[6]  TTL margin, ms
-- Returns  { admitted (0|1), decision time (us, decimal), c, p } as seen from window k, before
--          the decision: the client derives remaining, retry_after and reset_after exactly.
-- TTL      until both counts have left the estimate, (k + 2) W - t (+1 ms, + margin).

local state = redis.call('HMGET', KEYS[1], 'last', 'cur', 'prev')
local t = now_us(ARGV[1])
local last = tonumber(state[1]) or 0
if last > t then t = last end

local w = bn(ARGV[2])
local w_approx = tonumber(ARGV[2])
local t_ns = us_to_ns(t)
local k = bn_floor_div(t_ns, w, w_approx)
local c, p = 0, 0
if state[1] then
  local k_last = bn_floor_div(us_to_ns(last), w, w_approx)
  if k == k_last then
    c, p = tonumber(state[2]) or 0, tonumber(state[3]) or 0
  elseif k == k_last + 1 then
    p = tonumber(state[2]) or 0
  end
end

local n = tonumber(ARGV[3])
local e = bn_sub(t_ns, bn_mul(bn_int(k), w))
local lhs = bn_add(bn_mul(bn_int(c + n), w), bn_mul(bn_int(p), bn_sub(w, e)))
local admitted = bn_cmp(lhs, bn_mul(bn(ARGV[4]), w)) <= 0
if admitted and ARGV[5] ~= '1' then
  redis.call('HSET', KEYS[1], 'last', fmt(t), 'cur', fmt(c + n), 'prev', fmt(p))
  local to_clear = bn_sub(bn_mul(bn_int(k + 2), w), t_ns)
  redis.call('PEXPIRE', KEYS[1], ttl_ms(bn_approx(to_clear), tonumber(ARGV[6])))
end
return { admitted and 1 or 0, fmt(t), c, p }

end
-- rules.lua: one rule-set decision (include/ratelimit/rules_redis.hpp), atomically: every limit
-- that matches the request admits it and spends its cost, or none spends anything.
--
-- Not a standalone script: cmake/embed_lua.cmake builds the body (redis_scripts::rules in
-- redis/detail/scripts.hpp) as lua/prelude.lua, then each
-- algorithm script (lua/<algorithm>.lua) wrapped as `local function algo_<algorithm>(KEYS,
-- ARGV) ... end`, then this driver. Each limit runs its own algorithm's script unchanged, as a
-- dry run (its peek flag set) or for real; real runs of a request that ends denied are undone
-- (DUMP/RESTORE). Redis runs the whole body atomically: no other decision sees the interim.
--
-- KEYS     every limit's keys, in order. A per-client limit's keys carry the client's hash tag;
--          a shared limit's keys carry their own.
-- ARGV[1]  m, the number of limits (>= 1)
-- ARGV[2]  '1': dry runs only (change nothing), '0': decide
-- then per limit: the algorithm (1 token_bucket, 2 leaky_bucket, 3 fixed_window, 4 sliding_log,
--          5 sliding_counter), its number of keys, '1' if its keys are cheap to save (DUMP) or
--          '0' to dry-run it first instead, its number of dry-run and of real arguments, then
--          its dry-run ARGV and its real ARGV, exactly as its own script takes them.
-- Returns  { admitted (0|1), phase (0: denied, every reply reads as a dry run's; 1: admitted,
--            every reply is a real run's), reply_1, ..., reply_m }, reply_i being limit i's own
--            script reply.
-- TTL      each algorithm script sets its keys' TTLs as it does alone.

local algorithms = {
  algo_token_bucket, algo_leaky_bucket, algo_fixed_window, algo_sliding_log, algo_sliding_counter,
}
local m = tonumber(ARGV[1])
local dry_only = ARGV[2] == '1'
local limits = {}
local a, k = 3, 1
for i = 1, m do
  local id, nk, save, nd, nr = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2] == '1',
    tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  a = a + 5
  local keys, dry, real = {}, {}, {}
  for j = 1, nk do keys[j] = KEYS[k]; k = k + 1 end
  for j = 1, nd do dry[j] = ARGV[a]; a = a + 1 end
  for j = 1, nr do real[j] = ARGV[a]; a = a + 1 end
  limits[i] = { run = algorithms[id], keys = keys, save = save, dry = dry, real = real }
end

-- Undo for the real runs of a decision that ends denied: each key's DUMP and PTTL before it ran.
local function snapshot(keys)
  local saved = {}
  for j, key in ipairs(keys) do
    saved[j] = { redis.call('DUMP', key), redis.call('PTTL', key) }
  end
  return saved
end
local function restore(keys, saved)
  for j, key in ipairs(keys) do
    redis.call('DEL', key)
    local dump, ttl = saved[j][1], saved[j][2]
    if dump then redis.call('RESTORE', key, ttl > 0 and ttl or 0, dump) end
  end
end

local replies, admitted, phase = {}, true, 0
if dry_only then
  for i = 1, m do
    replies[i] = limits[i].run(limits[i].keys, limits[i].dry)
    if replies[i][1] ~= 1 then admitted = false end
  end
else
  -- 1. Limits whose keys are costly to save (a sliding log holds up to N entries) dry-run
  --    first; they are committed last (step 3), when nothing can deny any more.
  for i = 1, m do
    if not limits[i].save then
      replies[i] = limits[i].run(limits[i].keys, limits[i].dry)
      if replies[i][1] ~= 1 then admitted = false end
    end
  end
  -- 2. The others run for real, in order, each saved first (DUMP; the last one need not be: a
  --    denial changes nothing). At the first denial those already run are put back exactly as
  --    they were. Admission, the common case, so costs one run per limit and a DUMP per key.
  local saved, last_saved = {}, 0
  for i = 1, m do
    if limits[i].save then last_saved = i end
  end
  local run_so_far = {}
  for i = 1, m do
    if admitted and limits[i].save then
      if i < last_saved then saved[i] = snapshot(limits[i].keys) end
      replies[i] = limits[i].run(limits[i].keys, limits[i].real)
      if replies[i][1] ~= 1 then
        admitted = false
        for j = #run_so_far, 1, -1 do restore(limits[run_so_far[j]].keys, saved[run_so_far[j]]) end
      else
        run_so_far[#run_so_far + 1] = i
      end
    end
  end
  if admitted then
    -- 3. Commit the dry-run limits: they admitted, and nothing they depend on has moved.
    phase = 1
    for i = 1, m do
      if not limits[i].save then
        replies[i] = limits[i].run(limits[i].keys, limits[i].real)
        if replies[i][1] ~= 1 then admitted = false end
      end
    end
  else
    -- A denied request: every limit not yet asked dry-runs, for its reply. Each reply describes
    -- the state before its run, so real runs that were put back read exactly as dry runs.
    for i = 1, m do
      if replies[i] == nil then replies[i] = limits[i].run(limits[i].keys, limits[i].dry) end
    end
  end
end

local out = { admitted and 1 or 0, phase }
for i = 1, m do out[i + 2] = replies[i] end
return out
)lua"};

}  // namespace redis_scripts
}  // namespace ratelimit::detail
