# embed_lua.cmake: turns lua/*.lua into include/ratelimit/redis/detail/scripts.hpp,
# a committed header of `inline constexpr` raw strings, so the library stays header-only while
# the Lua sources stay real, readable files.
#
# Each script's body is lua/prelude.lua followed by lua/<algorithm>.lua; its SHA1 (what
# EVALSHA names it by) is computed here, so the client knows it without a round trip. The
# rule-set script `rules` is assembled here too (see below).
#
# Usage (script mode):
#   cmake -DLUA_DIR=<repo>/lua -DOUTPUT=<repo>/include/ratelimit/redis/detail/scripts.hpp \
#         [-DCHECK=ON] -P cmake/embed_lua.cmake
# With CHECK=ON nothing is written: it fails (non-zero exit) if OUTPUT differs from what the
# sources generate, which is the CTest check that the committed header is up to date.

cmake_minimum_required(VERSION 3.25)

if(NOT DEFINED LUA_DIR OR NOT DEFINED OUTPUT)
  message(FATAL_ERROR "embed_lua.cmake: pass -DLUA_DIR=... and -DOUTPUT=...")
endif()

set(algorithms token_bucket leaky_bucket fixed_window sliding_log sliding_counter)
file(READ "${LUA_DIR}/prelude.lua" prelude)

set(out "#pragma once\n")
string(APPEND out "/// @file redis/detail/scripts.hpp\n")
string(APPEND out "/// GENERATED from lua/*.lua by cmake/embed_lua.cmake: edit the .lua files, then run\n")
string(APPEND out "///   cmake -DLUA_DIR=lua -DOUTPUT=include/ratelimit/redis/detail/scripts.hpp -P cmake/embed_lua.cmake\n")
string(APPEND out "/// (a CTest test fails while this file is out of date).\n\n")
string(APPEND out "#include <string_view>\n\nnamespace ratelimit::detail {\n\n")
string(APPEND out "/// One Lua script: `body` is what EVAL sends, `sha1` what EVALSHA names.\n")
string(APPEND out "/// Thread safety: constant.\n")
string(APPEND out "struct RedisScript {\n  std::string_view name;\n  std::string_view sha1;\n  std::string_view body;\n};\n\n")
string(APPEND out "namespace redis_scripts {\n")

foreach(algorithm IN LISTS algorithms)
  file(READ "${LUA_DIR}/${algorithm}.lua" source)
  set(body "${prelude}${source}")
  string(FIND "${body}" ")lua\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "embed_lua.cmake: ${algorithm}.lua contains the raw-string end )lua\"")
  endif()
  string(SHA1 sha "${body}")
  string(APPEND out "\ninline constexpr RedisScript ${algorithm}{\n    \"${algorithm}\", \"${sha}\",\n    R\"lua(${body})lua\"};\n")
endforeach()

# The rule-set script (lua/rules.lua drives it, see rules_redis.hpp): the prelude once, each
# algorithm script as a local function, then the driver, so every limit of a request runs its
# own algorithm's code unchanged inside one atomic script.
set(body "${prelude}")
foreach(algorithm IN LISTS algorithms)
  file(READ "${LUA_DIR}/${algorithm}.lua" source)
  string(APPEND body "\nlocal function algo_${algorithm}(KEYS, ARGV)\n${source}\nend\n")
endforeach()
file(READ "${LUA_DIR}/rules.lua" driver)
string(APPEND body "${driver}")
string(FIND "${body}" ")lua\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "embed_lua.cmake: rules.lua contains the raw-string end )lua\"")
endif()
string(SHA1 sha "${body}")
string(APPEND out "\ninline constexpr RedisScript rules{\n    \"rules\", \"${sha}\",\n    R\"lua(${body})lua\"};\n")

string(APPEND out "\n}  // namespace redis_scripts\n}  // namespace ratelimit::detail\n")

if(CHECK)
  if(NOT EXISTS "${OUTPUT}")
    message(FATAL_ERROR "embed_lua.cmake: ${OUTPUT} is missing; regenerate it")
  endif()
  file(READ "${OUTPUT}" committed)
  if(NOT committed STREQUAL out)
    message(FATAL_ERROR "embed_lua.cmake: ${OUTPUT} is out of date with lua/*.lua; regenerate it "
                        "(see the command at the top of that file)")
  endif()
  message(STATUS "embed_lua.cmake: ${OUTPUT} is up to date")
else()
  file(WRITE "${OUTPUT}" "${out}")
endif()
