#pragma once
/// @file sliding_log.hpp
/// GENERATED from sliding_log.lua by cmake/embed_lua.cmake: edit the .lua file, then run
///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date). Thread safety: constant.

#include <string_view>

namespace ratelimit::lua {

/// The text of sliding_log.lua.
inline constexpr std::string_view sliding_log = R"lua(-- sliding_log.lua: one sliding log decision, atomically (the twin of SlidingLogModel).
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
)lua";

}  // namespace ratelimit::lua
