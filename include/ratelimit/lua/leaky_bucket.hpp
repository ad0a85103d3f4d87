#pragma once
/// @file leaky_bucket.hpp
/// GENERATED from leaky_bucket.lua by cmake/embed_lua.cmake: edit the .lua file, then run
///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date). Thread safety: constant.

#include <string_view>

namespace ratelimit::lua {

/// The text of leaky_bucket.lua.
inline constexpr std::string_view leaky_bucket = R"lua(-- leaky_bucket.lua: one leaky bucket decision, atomically (the twin of LeakyBucketModel).
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
)lua";

}  // namespace ratelimit::lua
