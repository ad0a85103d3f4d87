#pragma once
/// @file sliding_counter.hpp
/// GENERATED from sliding_counter.lua by cmake/embed_lua.cmake: edit the .lua file, then run
///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date). Thread safety: constant.

#include <string_view>

namespace ratelimit::lua {

/// The text of sliding_counter.lua.
inline constexpr std::string_view sliding_counter = R"lua(-- sliding_counter.lua: one sliding window counter decision, atomically (the twin of
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
)lua";

}  // namespace ratelimit::lua
