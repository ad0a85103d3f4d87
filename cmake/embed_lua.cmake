# embed_lua.cmake: turns each <name>.lua of a folder into <name>.hpp, a header holding the
# script as an `inline constexpr std::string_view <name>` raw string, so the library stays
# header-only while the Lua sources stay real, readable files.
#
# There is no list of scripts here: every .lua file of LUA_DIR is embedded. An algorithm names
# its own script (`Model::Wire::lua`, see core/wire.hpp) and the registry names the algorithms
# (algorithms/registry.hpp); the Redis storage composes what it sends from those (prelude +
# algorithm, or prelude + several algorithms + lua/multi.lua) and names it by its SHA1.
#
# Usage (script mode):
#   cmake -DLUA_DIR=<repo>/lua -DOUTPUT_DIR=<repo>/include/ratelimit/lua [-DNAMESPACE=ratelimit::lua]
#         [-DCHECK=ON] -P cmake/embed_lua.cmake
# With CHECK=ON nothing is written: it fails (non-zero exit) if a header differs from what its
# source generates, or if OUTPUT_DIR holds a header with no source (the CTest check that the
# committed headers are up to date). Tests embed their own scripts the same way into the build
# tree (tests/conformance: the test-only algorithm).
#
# Beside the scripts it writes required_commands.hpp: `required_commands`, every command name the
# scripts pass to redis.call or redis.pcall, lower case, sorted, each once. That is what a
# restricted Redis user needs beyond the client's own commands (redis/detail/commands.hpp), so
# the ACL in docs/redis.md is checked against it and never drifts from the scripts. A call whose
# command is not a quoted literal could not be listed: it fails the embedding.

cmake_minimum_required(VERSION 3.25)

if(NOT DEFINED LUA_DIR OR NOT DEFINED OUTPUT_DIR)
  message(FATAL_ERROR "embed_lua.cmake: pass -DLUA_DIR=... and -DOUTPUT_DIR=...")
endif()
get_filename_component(LUA_DIR "${LUA_DIR}" ABSOLUTE)
get_filename_component(OUTPUT_DIR "${OUTPUT_DIR}" ABSOLUTE)
if(NOT DEFINED NAMESPACE)
  set(NAMESPACE "ratelimit::lua")
endif()

file(GLOB sources RELATIVE "${LUA_DIR}" "${LUA_DIR}/*.lua")
list(SORT sources)
set(expected "")
set(stale "")
set(commands "")

# Compares `text` with OUTPUT_DIR/<file> (CHECK) or writes it there.
function(emit file text)
  set(header "${OUTPUT_DIR}/${file}")
  if(CHECK)
    if(NOT EXISTS "${header}")
      set(stale ${stale} "${header} (missing)" PARENT_SCOPE)
    else()
      file(READ "${header}" committed)
      if(NOT committed STREQUAL text)
        set(stale ${stale} "${header}" PARENT_SCOPE)
      endif()
    endif()
  else()
    # Written only when it changes: an unchanged header keeps its time, so that configuring
    # again (bench/run configures on each run) does not recompile everything that includes it.
    if(EXISTS "${header}")
      file(READ "${header}" current)
      if(current STREQUAL text)
        return()
      endif()
    endif()
    file(WRITE "${header}" "${text}")
  endif()
endfunction()
foreach(source IN LISTS sources)
  string(REGEX REPLACE "\\.lua$" "" name "${source}")
  if(NOT name MATCHES "^[a-z_][a-z0-9_]*$")
    message(FATAL_ERROR "embed_lua.cmake: ${source}: the name must be a C++ identifier in lower case")
  endif()
  if(name STREQUAL "required_commands")
    message(FATAL_ERROR "embed_lua.cmake: ${source}: the name is taken by the command list")
  endif()
  file(READ "${LUA_DIR}/${source}" body)
  # Every call's command: a quoted literal (its ACL name is the lower-case form).
  string(REGEX MATCHALL "redis\\.p?call[ \t]*\\(" calls "${body}")
  string(REGEX MATCHALL "redis\\.p?call[ \t]*\\([ \t]*['\"][A-Za-z|]+['\"]" literal_calls "${body}")
  list(LENGTH calls call_count)
  list(LENGTH literal_calls literal_count)
  if(NOT call_count EQUAL literal_count)
    message(FATAL_ERROR "embed_lua.cmake: ${source}: a redis.call or redis.pcall whose command "
                        "is not a quoted literal; the ACL's command list could not name it")
  endif()
  foreach(call IN LISTS literal_calls)
    string(REGEX REPLACE ".*['\"]([A-Za-z|]+)['\"]$" "\\1" command "${call}")
    string(TOLOWER "${command}" command)
    list(APPEND commands "${command}")
  endforeach()
  string(FIND "${body}" ")lua\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "embed_lua.cmake: ${source} contains the raw-string end )lua\"")
  endif()
  set(out "#pragma once\n")
  string(APPEND out "/// @file ${name}.hpp\n")
  string(APPEND out "/// GENERATED from ${source} by cmake/embed_lua.cmake: edit the .lua file, then run\n")
  string(APPEND out "///   cmake -DLUA_DIR=lua -DOUTPUT_DIR=include/ratelimit/lua -P cmake/embed_lua.cmake\n")
  string(APPEND out "/// (a CTest test fails while this file is out of date). Thread safety: constant.\n\n")
  string(APPEND out "#include <string_view>\n\nnamespace ${NAMESPACE} {\n\n")
  string(APPEND out "/// The text of ${source}.\n")
  string(APPEND out "inline constexpr std::string_view ${name} = R\"lua(${body})lua\";\n\n")
  string(APPEND out "}  // namespace ${NAMESPACE}\n")
  list(APPEND expected "${name}.hpp")
  emit("${name}.hpp" "${out}")
endforeach()

list(REMOVE_DUPLICATES commands)
list(SORT commands)
list(LENGTH commands command_count)
set(quoted "")
foreach(command IN LISTS commands)
  string(APPEND quoted "    \"${command}\",\n")
endforeach()
set(out "#pragma once\n")
string(APPEND out "/// @file required_commands.hpp\n")
string(APPEND out "/// GENERATED from the redis.call and redis.pcall commands of every script by\n")
string(APPEND out "/// cmake/embed_lua.cmake (regenerated with the scripts: see any script's header).\n")
string(APPEND out "/// Thread safety: constant.\n\n")
string(APPEND out "#include <array>\n#include <string_view>\n\nnamespace ${NAMESPACE} {\n\n")
string(APPEND out "/// Every Redis command the scripts call, as an ACL names it (lower case), sorted, each\n")
string(APPEND out "/// once: what a restricted user needs to run them, beside the client's own commands.\n")
string(APPEND out "inline constexpr std::array<std::string_view, ${command_count}> required_commands = {\n")
string(APPEND out "${quoted}};\n\n")
string(APPEND out "}  // namespace ${NAMESPACE}\n")
list(APPEND expected "required_commands.hpp")
emit("required_commands.hpp" "${out}")

if(CHECK)
  file(GLOB headers RELATIVE "${OUTPUT_DIR}" "${OUTPUT_DIR}/*.hpp")
  foreach(header IN LISTS headers)
    if(NOT header IN_LIST expected)
      list(APPEND stale "${OUTPUT_DIR}/${header} (no .lua source)")
    endif()
  endforeach()
  if(stale)
    list(JOIN stale "\n  " stale_lines)
    message(FATAL_ERROR "embed_lua.cmake: out of date with ${LUA_DIR}; regenerate (see the command "
                        "at the top of any generated header):\n  ${stale_lines}")
  endif()
  message(STATUS "embed_lua.cmake: ${OUTPUT_DIR} is up to date with ${LUA_DIR}")
endif()
