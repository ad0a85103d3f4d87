#pragma once
/// @file sliding_log.hpp
/// GENERATED from sliding_log.lua by cmake/embed_lua.cmake: edit the .lua file, then run
///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date). Thread safety: constant.

#include <string_view>

namespace ratelimit::lua {

/// The text of sliding_log.lua.
inline constexpr std::string_view sliding_log = R"lua(-- sliding_log.lua: one sliding log decision (the twin of SlidingLogModel).
--
-- Rule: the log holds the time of every admitted unit; at t the window is (t - W, t], so an
-- entry stamped exactly t - W no longer counts. Admit n iff |log| + n <= N, then log n units at
-- t; denied requests are not logged. When denied, the request fits again once the
-- (|log| + n - N)-th oldest unit has left the window.
-- One sorted set holds everything, so the state cannot be half lost:
--  - an entry per admitted microsecond: score = its time (us, >= 0), member = "<time>:<units>"
--    (requests admitted in the same us by any instance add to one entry);
--  - the header, member "" with score -1 - total, total = the units of every entry (expired ones
--    included until pruned): negative, so it always ranks first and no time range reaches it.
-- The latest admitted time (a request stamped earlier is decided then) is the newest entry's.
-- In whole us, an entry at e is live iff e * 1000 > t * 1000 - W, i.e. e >= t - reach with
-- reach = floor((W - 1) / 1000). Expired entries leave on an admission only: `last` then
-- becomes t, and no later decision can look back before it; a peek or a denial leaves them,
-- since a later request stamped before t (but after last) still sees them.
--
-- KEY      sorted set, as above
-- ARGV     now_us ('' = Redis TIME) | reach, us | n | N | peek ('1' changes nothing) | TTL margin
--          ms | a new entry's TTL, ms: ceil(W / 1 ms) + 1
-- Returns  { admitted (0|1), decision time (us), live units before the decision, newest entry's
--          time (us, -1 if none), the time of the (live + n - N)-th oldest unit (us, -1 unless
--          that is what a denial waits for) }
-- TTL      until the newest entry leaves the window.

local function units(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

return function(key, A, o)
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local total, newest, newest_member = 0, -1, nil
  if head[1] then
    if head[1] ~= '' then error('ratelimit: ' .. key .. ' does not hold a ratelimit log') end
    total = -1 - tonumber(head[2])
    local tail = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if tail[1] ~= '' then newest, newest_member = tonumber(tail[2]), tail[1] end
  end
  local t = now_us(A[o + 1])
  if newest > t then t = newest end

  -- Units that have left the window at t: the entries scored 0 .. cut.
  local cut = t - tonumber(A[o + 2]) - 1
  local expired = {}
  if total > 0 and cut >= 0 then expired = redis.call('ZRANGEBYSCORE', key, 0, cut) end
  local live = total
  for i = 1, #expired do live = live - units(expired[i]) end
  if live == 0 then newest = -1 end

  local n, limit = tonumber(A[o + 3]), tonumber(A[o + 4])
  local to_drop = live + n - limit
  local admitted = n <= limit and to_drop <= 0
  local target = -1
  if n <= limit and to_drop > 0 then
    -- Past the header and the expired entries, the oldest live units first.
    local seen, start = 0, 1 + #expired
    while target < 0 do
      local page = redis.call('ZRANGE', key, start, start + 127, 'WITHSCORES')
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
  local reply = { admitted and 1 or 0, t, live, newest, target }
  if not admitted or A[o + 5] == '1' then return reply end
  return reply, function()
    if #expired > 0 then redis.call('ZREMRANGEBYSCORE', key, 0, cut) end
    local units_at_t = n
    if newest == t then
      units_at_t = n + units(newest_member)
      redis.call('ZREM', key, newest_member)
    end
    redis.call('ZADD', key, -1 - (live + n), '', t, string.format('%.0f:%.0f', t, units_at_t))
    redis.call('PEXPIRE', key, tonumber(A[o + 7]) + tonumber(A[o + 6]))
  end
end
)lua";

}  // namespace ratelimit::lua
