-- anchored_window.lua: the test-only sixth algorithm (tests/support/anchored_window.hpp), the
-- twin of AnchoredWindowModel. It exists to show that an algorithm is added by its own files
-- and one registry line: it is embedded by cmake/embed_lua.cmake like the library's scripts.
--
-- Rule: at most N units per window of W that starts at the key's first admitted request after
-- the previous window ended (a window anchored at the client, not at the clock's epoch).
--
-- KEYS[1]  hash: s = the window's start, us; c = units admitted in it; l = latest admitted time, us
-- ARGV[1]  now, whole us; '' to read Redis TIME instead
-- ARGV[2]  W, whole us
-- ARGV[3]  n, the cost
-- ARGV[4]  N, the limit
-- ARGV[5]  '1' for a peek (changes nothing), '0' otherwise
-- ARGV[6]  TTL margin, ms
-- Returns  { admitted (0|1), decision time (us), window start (us), c } as seen before the
--          decision (c = 0 once the window has ended).
-- TTL      until the window ends (+1 ms, + margin).

local state = redis.call('HMGET', KEYS[1], 's', 'c', 'l')
local t = now_us(ARGV[1])
local last = tonumber(state[3]) or 0
if last > t then t = last end
local w, n, limit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local start = tonumber(state[1]) or 0
local c = tonumber(state[2]) or 0
if c > 0 and t >= start + w then c = 0 end
local admitted = n <= limit and c + n <= limit
if admitted and ARGV[5] ~= '1' then
  local new_start = c == 0 and t or start
  redis.call('HSET', KEYS[1], 's', fmt(new_start), 'c', fmt(c + n), 'l', fmt(t))
  redis.call('PEXPIRE', KEYS[1], ttl_ms((new_start + w - t) * 1000, tonumber(ARGV[6])))
end
return { admitted and 1 or 0, fmt(t), fmt(start), c }
