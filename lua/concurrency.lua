-- concurrency.lua: one concurrency limit decision (the twin of ConcurrencyModel): at most N
-- requests in flight per key, each holding a slot until it releases it or its lease ends.
--
-- The key's leases are a sorted set scored by their end (us): a lease ending at e is held at t
-- iff e > t. Acquire n iff held + n <= N, then add n leases ending at the client's lease end.
-- Release: drop one lease ending exactly at the given end (leases with equal ends are
-- interchangeable, so which one does not matter), if it is still held. Leases that have ended
-- leave on a write only (a peek or a denial changes nothing), as in the C++ model.
-- Members are "<end>:<seq>", unique through the sequence kept in the member '#', whose score
-- is -seq: negative, so no time range reaches it. Times are whole us below 2^53; they reach
-- Redis as numbers (formatted exactly) or through string.format('%.0f') (Lua's own number to
-- string conversion keeps only 14 digits, and times in us since 1970 have 16).
--
-- KEY      sorted set, as above (Redis Cluster: the client passes it, one key per call)
-- ARGV     now_us (never '': the client refuses TimeSource::redis, the lease ends are its own)
--          | lease end, us | 's' acquire or 'r' release | n (at most N + 1) | N | peek ('1'
--          changes nothing) | TTL margin ms
-- Returns  { admitted (0|1), decision time t (us), leases held after the decision, the end of
--          the (held + n - N)-th earliest lease (us; -1 unless denied with n <= N), the latest
--          held lease's end after the decision (us, -1 if none) }
-- TTL      until the latest lease ends; the key is deleted when none is held.

local function last_end(key)
  local m = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if m[2] and tonumber(m[2]) >= 0 then return tonumber(m[2]) end
  return -1
end

local function decide(key, A, o)
  local t = tonumber(A[o + 1])
  local n, N = tonumber(A[o + 4]), tonumber(A[o + 5])
  local after_t = string.format('(%.0f', t)  -- exclusive: a lease ending at t is not held
  local held = redis.call('ZCOUNT', key, after_t, '+inf')
  local r = { 1, t, held, -1, -1 }
  if A[o + 3] == 's' and held + n > N then
    r[1] = 0
    if n <= N then
      local m = redis.call('ZRANGEBYSCORE', key, after_t, '+inf', 'WITHSCORES', 'LIMIT',
                           held + n - N - 1, 1)
      r[4] = tonumber(m[2])
    end
  end
  local go = r[1] == 1 and A[o + 6] ~= '1'
  if not go and held > 0 then r[5] = last_end(key) end
  return r, go
end

-- The admitted operation's write, from decide's reply r (completed here: held and latest end
-- after it).
local function write(key, A, o, r)
  local t, e = r[2], tonumber(A[o + 2])
  redis.call('ZREMRANGEBYSCORE', key, 0, t)
  if A[o + 3] == 's' then
    if e > t then  -- a lease that has already ended (a clock stepped back by more) holds nothing
      local n = tonumber(A[o + 4])
      for _ = 1, n do
        local seq = -tonumber(redis.call('ZINCRBY', key, -1, '#'))
        redis.call('ZADD', key, e, string.format('%.0f:%.0f', e, seq))
      end
      r[3] = r[3] + n
    end
  else
    local m = redis.call('ZRANGEBYSCORE', key, e, e, 'LIMIT', 0, 1)
    if m[1] then
      redis.call('ZREM', key, m[1])
      r[3] = r[3] - 1
    end
  end
  r[5] = last_end(key)
  if r[5] > t then
    redis.call('PEXPIRE', key, ttl_ms(r[5] - t, tonumber(A[o + 7])))
  else
    redis.call('DEL', key)
  end
end

return decide, write
