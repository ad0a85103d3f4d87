-- quota.lua: one calendar quota decision (the twin of CalendarQuotaModel).
--
-- At most N per calendar period (day, week, month or year in an IANA time zone). Redis has no
-- time-zone data: the client computes the end of the period that holds its decision time and
-- passes it; the stored state remembers the end of the period it counts, so a request stamped
-- before the key's latest time (decided at that time) still finds its period. Admit n iff
-- c + n <= N, c the count of the period holding t (0 once that period has ended).
-- Times are whole microseconds below 2^53 (period boundaries are whole seconds).
--
-- KEY      string, struct '<ddd': last (latest admitted time, us), e (end of last's period,
--          us), c (count of that period)
-- ARGV     now_us (never '': the client refuses TimeSource::redis for quotas) | end of now's
--          period, us | n (at most N + 1) | N | peek ('1' changes nothing) | TTL margin ms
-- Returns  { admitted (0|1), decision time t (us), c, e } before the decision: e is the end
--          of t's period; the client derives remaining, retry_after and reset_after.
-- TTL      until the period ends.

local function decide(key, A, o)
  local last, e, c = load_state(key, '<ddd', 24)
  local t = tonumber(A[o + 1])
  if last and last > t then t = last end
  if not (last and t < e) then
    c, e = 0, tonumber(A[o + 2])
  end
  local admitted = c + tonumber(A[o + 3]) <= tonumber(A[o + 4])
  return { admitted and 1 or 0, t, c, e }, admitted and A[o + 5] ~= '1'
end

-- The admitted request's write, from decide's reply r: c <- c + n.
local function write(key, A, o, r)
  redis.call('SET', key, struct.pack('<ddd', r[2], r[4], r[3] + tonumber(A[o + 3])), 'PX',
             ttl_ms(r[4] - r[2], tonumber(A[o + 6])))
end

return decide, write
