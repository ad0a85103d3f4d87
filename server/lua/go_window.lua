-- go_window.lua: the Redis twin of GoWindowModel (server/src/go_window.hpp), the counting of
-- Envoy's reference rate limit service: a window of W whole seconds aligned to the Unix epoch,
-- whose count every hit increments, over the limit or not. Embedded by cmake/embed_lua.cmake
-- and run after the library's prelude (core/wire.hpp's convention: it returns its decide and
-- write functions; "write" here means "count": every hit that is not a read or a dry run).
--
-- KEY      string, struct '<dd': k + 1 of the counted window k, and its count
-- ARGV     now_us ('' = Redis TIME) | W, whole seconds | n, the hits (0 reads) | peek ('1'
--          changes nothing: a dry run of n hits) | TTL margin ms | N, the limit | count denied
--          hits ('1', the reference's) or only admitted ones ('0')
-- Returns  { admitted (1 when count + n <= N: the all-or-nothing driver, lua/multi.lua, writes
--          only when every part admits), decision time (us), the count before the hits (0
--          when the stored window is another) }
-- TTL      until the window ends.

local function decide(key, A, o)
  local win, c = load_state(key, '<dd', 16)
  local t = now_us(A[o + 1])
  local w = tonumber(A[o + 2])
  local n = tonumber(A[o + 3])
  local k = math.floor(math.floor(t / 1000000) / w)
  if not win or win ~= k + 1 then c = 0 end
  local admitted = 0
  if c + n <= tonumber(A[o + 6]) then admitted = 1 end
  return { admitted, t, c }, n > 0 and A[o + 4] ~= '1' and (admitted == 1 or A[o + 7] == '1')
end

local function write(key, A, o, r)
  local t, c = r[2], r[3]
  local w = tonumber(A[o + 2])
  local k = math.floor(math.floor(t / 1000000) / w)
  redis.call('SET', key, struct.pack('<dd', k + 1, c + tonumber(A[o + 3])), 'PX',
             ttl_ms((k + 1) * w * 1000000 - t, tonumber(A[o + 5])))
end

return decide, write
