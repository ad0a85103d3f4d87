#pragma once
/// @file token_bucket.hpp
/// GENERATED from token_bucket.lua by cmake/embed_lua.cmake: edit the .lua file, then run
///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date). Thread safety: constant.

#include <string_view>

namespace ratelimit::lua {

/// The text of token_bucket.lua.
inline constexpr std::string_view token_bucket = R"lua(-- token_bucket.lua: one token bucket decision, atomically (the twin of TokenBucketModel).
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
)lua";

}  // namespace ratelimit::lua
