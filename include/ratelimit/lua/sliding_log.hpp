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
--  - the header, member "<oldest>:<newest>:<newest's units>" (entry times, us) with score
--    -1 - total, total = the units of every entry (expired ones included until pruned):
--    negative, so it always ranks first and no time range reaches it. One read gives what a
--    decision needs: nothing expired before the oldest entry, and the latest admitted time (a
--    request stamped earlier is decided then) is the newest's.
-- In whole us, an entry at e is live iff e * 1000 > t * 1000 - W, i.e. e >= t - reach with
-- reach = floor((W - 1) / 1000). Expired entries leave on an admission only: `last` then
-- becomes t, and no later decision can look back before it; a peek or a denial leaves them,
-- since a later request stamped before t (but after last) still sees them.
--
-- KEY      sorted set, as above
-- ARGV     now_us ('' = Redis TIME) | reach, us | n | N | mode: '0' a take, '1' a peek (changes
--          nothing), 'r<t0_us>' a refund of a take at t0, 'p' a penalty | TTL margin ms | a new
--          entry's TTL, ms: ceil(W / 1 ms) + 1
-- Refund (always applied): min(n, its units) leave the entry stamped min(t0, t) if it is live;
-- an entry left empty goes, except the newest, whose time the header keeps (as the key's
-- latest time). Penalty: min(n, 2N - live) units are logged at t as a take's. Their reply is
-- the one a cost-1 peek would get right after them (the client decodes it so).
-- Returns  { admitted (0|1), decision time (us), live units before the decision, newest entry's
--          time (us, -1 if none), the time of the (live + n - N)-th oldest unit (us, -1 unless
--          that is what a denial waits for), the oldest live entry's time (us, -1 unless the
--          target was sought: a cache of the denial stays exact until that entry leaves) }
-- TTL      until the newest entry leaves the window.

local function units(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

local function decide(key, A, o)
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local total, oldest, newest, newest_units = 0, -1, -1, 0
  if head[1] then
    local a, b, c = string.match(head[1], '^(%d+):(%d+):(%d+)$')
    if not a or tonumber(head[2]) >= 0 then
      error('ratelimit: ' .. key .. ' does not hold a ratelimit log')
    end
    total, oldest, newest, newest_units = -1 - tonumber(head[2]), tonumber(a), tonumber(b), tonumber(c)
  end
  local t = now_us(A[o + 1])
  if newest > t then t = newest end

  -- Units that have left the window at t: the entries scored 0 .. cut (none before the oldest).
  local cut = t - tonumber(A[o + 2]) - 1
  local expired = {}
  if total > 0 and oldest <= cut then expired = redis.call('ZRANGEBYSCORE', key, 0, cut) end
  local live = total
  for i = 1, #expired do live = live - units(expired[i]) end

  local n, limit = tonumber(A[o + 3]), tonumber(A[o + 4])
  local to_drop = live + n - limit
  local admitted = n <= limit and to_drop <= 0
  local target, first_live = -1, -1
  if n <= limit and to_drop > 0 then
    -- Past the header and the expired entries, the oldest live units first.
    local seen, start = 0, 1 + #expired
    while target < 0 do
      local page = redis.call('ZRANGE', key, start, start + 127, 'WITHSCORES')
      if #page == 0 then break end
      if first_live < 0 and page[2] then first_live = tonumber(page[2]) end
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
  local mode = A[o + 5]
  local adjusting = mode ~= '0' and mode ~= '1'
  if adjusting then admitted = true end
  local r = { admitted and 1 or 0, t, live, live > 0 and newest or -1, target, first_live }
  -- For write; not part of the reply (only the array part is returned).
  r.header, r.cut, r.expired, r.oldest, r.newest, r.newest_units =
    head[1], cut, #expired, oldest, newest, newest_units
  r.total = total
  return r, admitted and mode ~= '1'
end

-- The admitted request's write, from decide's reply r: expired entries leave, n units at t,
-- the header follows.
local function log_units(key, A, o, r, n)
  local t, live, oldest = r[2], r[3], r.oldest
  if r.expired > 0 then
    redis.call('ZREMRANGEBYSCORE', key, 0, r.cut)
    oldest = tonumber(redis.call('ZRANGE', key, 1, 1, 'WITHSCORES')[2] or t)
  end
  if oldest < 0 then oldest = t end
  local units_at_t = n
  if r.newest == t then units_at_t = n + r.newest_units end  -- the newest entry is at t: n joins it
  -- Add before removing: removing every member first would delete the key, and on a Redis
  -- Cluster slot being migrated a script may not touch a key its node does not hold (the write
  -- would fail half done, the state lost).
  local header = string.format('%.0f:%.0f:%.0f', oldest, t, units_at_t)
  redis.call('ZADD', key, -1 - (live + n), header, t, string.format('%.0f:%.0f', t, units_at_t))
  if r.newest == t then
    redis.call('ZREM', key, r.header, string.format('%.0f:%.0f', t, r.newest_units))
  elseif r.header and r.header ~= header then
    redis.call('ZREM', key, r.header)
  end
  redis.call('PEXPIRE', key, tonumber(A[o + 7]) + tonumber(A[o + 6]))
end

-- A refund: units leave the live entry stamped t0 (see the header); the key keeps its TTL.
local function refund(key, A, o, r)
  local t, n = r[2], tonumber(A[o + 3])
  local t0 = tonumber(string.sub(A[o + 5], 2))
  if t0 > t then t0 = t end
  if t0 <= r.cut then return end
  local m = redis.call('ZRANGEBYSCORE', key, t0, t0, 'LIMIT', 0, 1)[1]
  if not m then return end
  local had = units(m)
  if had == 0 then return end
  local left = had - math.min(n, had)
  local nu = r.newest_units
  if t0 == r.newest then nu = left end
  local header = string.format('%.0f:%.0f:%.0f', r.oldest, r.newest, nu)
  local total = r.total - (had - left)
  redis.call('ZADD', key, -1 - total, header)
  if left > 0 then redis.call('ZADD', key, t0, string.format('%.0f:%.0f', t0, left)) end
  redis.call('ZREM', key, m)
  if r.header ~= header then redis.call('ZREM', key, r.header) end
end

-- A take's write, or a refund's or a penalty's; then the reply of the latter two becomes what
-- a cost-1 peek gets after them.
local function write(key, A, o, r)
  local mode = A[o + 5]
  if mode == '0' then return log_units(key, A, o, r, tonumber(A[o + 3])) end
  if mode == 'p' then
    local most = 2 * tonumber(A[o + 4])
    if r[3] < most then log_units(key, A, o, r, math.min(tonumber(A[o + 3]), most - r[3])) end
  else
    refund(key, A, o, r)
  end
  local peek = {}
  peek[o + 1], peek[o + 2], peek[o + 3], peek[o + 4], peek[o + 5] =
    string.format('%.0f', r[2]), A[o + 2], '1', A[o + 4], '1'
  local after = decide(key, peek, o)
  for i = 1, 6 do r[i] = after[i] end
end

return decide, write
)lua";

}  // namespace ratelimit::lua
