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
foreach(source IN LISTS sources)
  string(REGEX REPLACE "\\.lua$" "" name "${source}")
  if(NOT name MATCHES "^[a-z_][a-z0-9_]*$")
    message(FATAL_ERROR "embed_lua.cmake: ${source}: the name must be a C++ identifier in lower case")
  endif()
  file(READ "${LUA_DIR}/${source}" body)
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
  set(header "${OUTPUT_DIR}/${name}.hpp")
  list(APPEND expected "${name}.hpp")
  if(CHECK)
    if(NOT EXISTS "${header}")
      list(APPEND stale "${header} (missing)")
    else()
      file(READ "${header}" committed)
      if(NOT committed STREQUAL out)
        list(APPEND stale "${header}")
      endif()
    endif()
  else()
    file(WRITE "${header}" "${out}")
  endif()
endforeach()

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
