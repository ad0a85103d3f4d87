#pragma once
/// @file fixed_window.hpp
/// GENERATED from fixed_window.lua by cmake/embed_lua.cmake: edit the .lua file, then run
///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date). Thread safety: constant.

#include <string_view>

namespace ratelimit::lua {

/// The text of fixed_window.lua.
inline constexpr std::string_view fixed_window = R"lua(-- fixed_window.lua: one fixed window decision, atomically (the twin of FixedWindowModel).
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
)lua";

}  // namespace ratelimit::lua
