-- gcra.lua: one token bucket or leaky bucket decision (the twin of detail::gcra_apply, used by
-- TokenBucketModel and LeakyBucketModel).
--
-- Both are GCRA (ITU-T I.371, virtual scheduling): one timestamp `at`, the instant the bucket is
-- full again (token bucket) or the queue is empty (leaky bucket). A request of n units at t is
-- admitted iff the backlog D = max(0, at - t) satisfies D + n x period/count <= limit x
-- period/count, and (leaky bucket, when the caller bounds its wait) D <= max_wait; then
-- at <- max(at, t) + n x period/count.
-- Exact in doubles: durations are counted in 1/count ns, and every one of them (at, D, n's and
-- the slack's worth) is held as a pair (us, rem): us x U + rem with U = 1000 x count <= 10^12
-- and 0 <= rem < U. The us parts stay below 2^53: at <= t + a whole refill (<= 100 years).
-- The client sends the request's worth and the slack (limit - n) x period/count as pairs, so
-- the test D + n <= limit is D <= slack, a comparison of pairs.
-- A key written under other parameters (a reloaded rule's, a limiter of the same name with
-- another rate) holds its remainder in the writer's unit, which the state does not keep: one
-- that is not below this U is rounded up, at <- the next whole us. Every remainder is below
-- one us, so that is never before the instant written: never more capacity than it had.
--
-- KEY      string, struct '<ddd': at_us, at_rem, last (latest admitted time, us: a request
--          stamped earlier is decided then)
-- ARGV     now_us ('' = Redis TIME) | U | n_us | n_rem | slack_us | slack_rem (-1 when n > limit)
--          | mode: '0' a take, '1' a peek (changes nothing), 'r<t0_us>' a refund of a take
--          at t0, 'p' a penalty | TTL margin ms | wait_us | wait_rem (max_wait x count as a
--          pair; wait_us '' for no bound, -1 when max_wait < 0). For a penalty the slack pair
--          is the backlog's cap instead.
-- Refund (always applied, reply admitted 1): owed = t0 + n - t; if owed > 0 and the bucket is
-- not full, at <- max(at - owed, t). Penalty: at <- max(at, t) + n, at most t + cap. The
-- client reads the state before them from the reply and runs the same step in C++.
-- Returns  { admitted (0|1), decision time (us), at_us, at_rem } before the decision (the
--          remainder rounded up as above when it was not below U): the client derives
--          remaining, retry_after, reset_after and delay with the C++ model.
-- TTL      until the bucket is full again (the state then decides like a fresh key).

-- (a_us, a_rem) <= (b_us, b_rem), remainders normalized.
local function pair_le(a_us, a_rem, b_us, b_rem)
  return a_us < b_us or (a_us == b_us and a_rem <= b_rem)
end

local function decide(key, A, o)
  local at, rem, last = load_state(key, '<ddd', 24)
  if not at then at, rem, last = 0, 0, 0 end
  if rem >= tonumber(A[o + 2]) then at, rem = at + 1, 0 end
  local t = now_us(A[o + 1])
  if last > t then t = last end
  local d_us, d_rem = 0, 0
  if at > t or (at == t and rem > 0) then d_us, d_rem = at - t, rem end
  local mode = A[o + 7]
  if mode ~= '0' and mode ~= '1' then return { 1, t, at, rem }, true end
  local admitted = pair_le(d_us, d_rem, tonumber(A[o + 5]), tonumber(A[o + 6]))
  if admitted and A[o + 9] ~= '' then
    admitted = pair_le(d_us, d_rem, tonumber(A[o + 9]), tonumber(A[o + 10]))
  end
  return { admitted and 1 or 0, t, at, rem }, admitted and mode ~= '1'
end

-- A refund's new (at, rem), or nil when nothing is owed back (see the header).
local function refunded(A, o, t, at, rem, unit)
  local t0 = tonumber(string.sub(A[o + 7], 2))
  if t0 > t then t0 = t end
  local o_us, o_rem = t0 - t + tonumber(A[o + 3]), tonumber(A[o + 4])
  if o_us < 0 or (o_us == 0 and o_rem == 0) then return nil end
  if at < t or (at == t and rem == 0) then return nil end
  at, rem = at - o_us, rem - o_rem
  if rem < 0 then at, rem = at - 1, rem + unit end
  if at < t then at, rem = t, 0 end
  return at, rem
end

-- The admitted request's write, from decide's reply r: at <- max(at, t) + n (a take or a
-- penalty), or a refund's.
local function write(key, A, o, r)
  local t, at, rem = r[2], r[3], r[4]
  local unit, mode = tonumber(A[o + 2]), A[o + 7]
  if mode ~= '0' and mode ~= 'p' then
    at, rem = refunded(A, o, t, at, rem, unit)
    if not at then return end
  else
    if at < t or (at == t and rem == 0) then at, rem = t, 0 end
    local c_us, c_rem
    if mode == 'p' then
      c_us, c_rem = t + tonumber(A[o + 5]), tonumber(A[o + 6])
      if pair_le(c_us, c_rem, at, rem) then return end  -- already at the cap
    end
    at, rem = at + tonumber(A[o + 3]), rem + tonumber(A[o + 4])
    if rem >= unit then at, rem = at + 1, rem - unit end
    if c_us and pair_le(c_us, c_rem, at, rem) then at, rem = c_us, c_rem end
  end
  redis.call('SET', key, struct.pack('<ddd', at, rem, t), 'PX', ttl_ms(at - t, tonumber(A[o + 8])))
end

return decide, write
