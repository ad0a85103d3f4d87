-- anchored_window.lua: the test-only sixth algorithm (tests/support/anchored_window.hpp), the
-- twin of AnchoredWindowModel. It exists to show that an algorithm is added by its own files
-- and one registry line: it is embedded by cmake/embed_lua.cmake like the library's scripts,
-- and follows their convention (core/wire.hpp): it returns its decide and write functions.
--
-- Rule: at most N units per window of W that starts at the key's first admitted request after
-- the previous window ended (a window anchored at the client, not at the clock's epoch).
--
-- KEY      string, struct '<ddd': the window's start (us), c = units admitted in it, the
--          latest admitted time (us)
-- ARGV     now_us ('' = Redis TIME) | W, whole us | n, the cost (at most N + 1) | N | peek ('1'
--          changes nothing) | TTL margin ms
-- Returns  { admitted (0|1), decision time (us), window start (us), c } as seen before the
--          decision (c = 0 once the window has ended).
-- TTL      until the window ends.

local function decide(key, A, o)
  local start, c, last = load_state(key, '<ddd', 24)
  if not start then start, c, last = 0, 0, 0 end
  local t = now_us(A[o + 1])
  if last > t then t = last end
  local w, n, limit = tonumber(A[o + 2]), tonumber(A[o + 3]), tonumber(A[o + 4])
  if c > 0 and t >= start + w then c = 0 end
  local admitted = n <= limit and c + n <= limit
  return { admitted and 1 or 0, t, start, c }, admitted and A[o + 5] ~= '1'
end

local function write(key, A, o, r)
  local t, start, c = r[2], r[3], r[4]
  if c == 0 then start = t end
  redis.call('SET', key, struct.pack('<ddd', start, c + tonumber(A[o + 3]), t), 'PX',
             ttl_ms(start + tonumber(A[o + 2]) - t, tonumber(A[o + 6])))
end

return decide, write
