#pragma once
/// @file prelude.hpp
/// GENERATED from prelude.lua by cmake/embed_lua.cmake: edit the .lua file, then run
///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date). Thread safety: constant.

#include <string_view>

namespace ratelimit::lua {

/// The text of prelude.lua.
inline constexpr std::string_view prelude = R"lua(-- prelude.lua: shared by every ratelimit script. cmake/embed_lua.cmake prepends it to each
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

)lua";

}  // namespace ratelimit::lua
