#pragma once
/// @file multi.hpp
/// GENERATED from multi.lua by cmake/embed_lua.cmake: edit the .lua file, then run
///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake
/// (a CTest test fails while this file is out of date). Thread safety: constant.

#include <string_view>

namespace ratelimit::lua {

/// The text of multi.lua.
inline constexpr std::string_view multi = R"lua(-- multi.lua: the driver of one all-or-nothing decision over several keys
-- (RedisStorage::decide_all, used by rule sets): every part admits and spends its cost, or none
-- spends anything.
--
-- Composed by redis/detail/script.hpp as lua/prelude.lua, then each algorithm of the call's
-- parts as `algorithms[<wire id>] = { (function() <its script> end)() }` (its decide and write
-- functions, lua/single.lua), then this. Every part is decided first (reads only); only when all
-- admit are their writes run. Redis runs the whole
-- body atomically, and parts never share a key (the client refuses duplicates), so a part's
-- decision cannot change another's: each part costs what its own decision costs.
--
-- KEYS     one per part, in order. Parts that share a tag share a hash tag (one slot).
-- ARGV[1]  m, the number of parts (>= 1)
-- ARGV[2]  '1': decide only (change nothing), '0': decide and, if all admit, write
-- then per part: its algorithm's wire id, its number of arguments, then its arguments exactly
--          as its own script takes them.
-- Returns  { admitted (0|1), written (0|1), reply_1, ..., reply_m }: each part's own reply,
--          describing its state before the decision.

local m, dry = tonumber(ARGV[1]), ARGV[2] == '1'
local out, writes, admitted = { 0, 0 }, {}, true
local a = 3
for i = 1, m do
  local algorithm = algorithms[tonumber(ARGV[a])]
  local reply, to_write = algorithm[1](KEYS[i], ARGV, a + 1)
  if reply[1] ~= 1 then admitted = false end
  out[i + 2] = reply
  if to_write then writes[i] = { algorithm[2], a + 1 } end
  a = a + 2 + tonumber(ARGV[a + 1])
end
if admitted then
  out[1] = 1
  if not dry then
    for i = 1, m do
      if writes[i] then writes[i][1](KEYS[i], ARGV, writes[i][2], out[i + 2]) end
    end
    out[2] = 1
  end
end
return out
)lua";

}  // namespace ratelimit::lua
