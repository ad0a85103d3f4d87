#pragma once
/// @file prelude.hpp
/// GENERATED from prelude.lua by cmake/embed_lua.cmake: edit the .lua file, then run
///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date). Thread safety: constant.

#include <string_view>

namespace ratelimit::lua {

/// The text of prelude.lua.
inline constexpr std::string_view prelude = R"lua(-- prelude.lua: shared by every ratelimit script (redis/detail/script.hpp puts it first).
--
-- Exactness: Redis Lua numbers are IEEE doubles, exact for whole numbers below 2^53. Every
-- quantity the scripts hold stays below that: times are whole microseconds (below 2^52.1 for
-- clock readings up to 2^62 ns); the buckets keep their timestamp as whole us plus a remainder
-- (lua/gcra.lua); the sliding counter compares its products as two limbs (lua/window.lua).
-- Numbers that reach redis.call are below 10^14, where Lua's 14-digit formatting is exact;
-- state is packed with struct.pack, replies are returned as numbers (exact integer replies).

-- The decision's time in whole microseconds: the caller's (arg) or, when arg is empty, Redis's
-- own clock (TIME), so that hosts whose clocks disagree still share one time line. Scripts that
-- read TIME and then write need effects replication: the default since Redis 5; asked for
-- explicitly on older servers.
local function now_us(arg)
  if arg ~= '' then return tonumber(arg) end
  if redis.replicate_commands then redis.replicate_commands() end
  local tm = redis.call('TIME')
  return tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end

-- The packed state of `key` (struct format `fmt`, `size` bytes), or nil for a missing key. A
-- value of another size was not written by this format: refuse it rather than misread it.
local function load_state(key, fmt, size)
  local s = redis.call('GET', key)
  if not s then return nil end
  if #s ~= size then error('ratelimit: ' .. key .. ' does not hold ratelimit state') end
  return struct.unpack(fmt, s)
end

-- A PEXPIRE/PX argument for a state that matters for `us` more microseconds: whole ms rounded
-- up (floor + 1 covers any remainder below 1 us), plus the caller's margin (ms) for clocks that
-- disagree.
local function ttl_ms(us, margin_ms)
  return math.floor(us / 1000) + 1 + margin_ms
end
)lua";

}  // namespace ratelimit::lua
