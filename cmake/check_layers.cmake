# check_layers.cmake: the include graph of include/ratelimit/ respects the layers.
#
# Each folder under include/ratelimit/ is a layer; a header may include headers of its own layer
# and of lower layers only. The order (docs/layout.md, the table of layers):
#
#   0  core          decision, rate, clocks, the model / storage / wire concepts, the limiter
#   0  lua           the embedded Lua scripts (generated, dependency-free)
#   1  memory        the in-process storage (the algorithms' default, so below them)
#   1  http          response headers from decisions
#   1  testing       ManualClock (only the top-level headers may include it)
#   1  metrics       the Prometheus exporter, a listener (core/listener.hpp)
#   2  algorithms    the pure models, their wire codecs, the registry
#   3  calendar      calendar periods in IANA time zones and the calendar quota (date-tz)
#   4  redis         the Redis storage, cluster, batch; redis/detail/ the transport
#   4  rules         rules files and rule sets
#   5  (top level)   the entry headers: ratelimit.hpp, redis.hpp, rules.hpp, calendar.hpp, ...
#
# Layers of equal rank never include each other. Quoted includes are resolved relative to the
# including file, <ratelimit/...> includes relative to the include folder.
#
# Usage: cmake -DINCLUDE_DIR=<dir holding ratelimit/> -P cmake/check_layers.cmake
# Exits non-zero and lists every upward or sideways include.

cmake_minimum_required(VERSION 3.25)
if(NOT DEFINED INCLUDE_DIR)
  message(FATAL_ERROR "check_layers.cmake: pass -DINCLUDE_DIR=...")
endif()
get_filename_component(INCLUDE_DIR "${INCLUDE_DIR}" ABSOLUTE)

set(rank_core 0)
set(rank_lua 0)
set(rank_memory 1)
set(rank_http 1)
set(rank_testing 1)
set(rank_metrics 1)
set(rank_algorithms 2)
set(rank_calendar 3)
set(rank_redis 4)
set(rank_rules 4)
set(rank_top 5)

# layer_of(<out> <absolute path>): the layer of a header under INCLUDE_DIR/ratelimit.
function(layer_of out path)
  file(RELATIVE_PATH rel "${INCLUDE_DIR}/ratelimit" "${path}")
  if(rel MATCHES "^\\.\\./")
    set(${out} "outside" PARENT_SCOPE)
  elseif(rel MATCHES "/")
    string(REGEX REPLACE "/.*" "" layer "${rel}")
    set(${out} "${layer}" PARENT_SCOPE)
  else()
    set(${out} "top" PARENT_SCOPE)
  endif()
endfunction()

file(GLOB_RECURSE headers "${INCLUDE_DIR}/ratelimit/*.hpp")
set(violations "")
set(checked 0)
foreach(header IN LISTS headers)
  layer_of(from "${header}")
  if(NOT DEFINED rank_${from})
    list(APPEND violations "${header}: folder '${from}' is not a known layer")
    continue()
  endif()
  file(STRINGS "${header}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
  get_filename_component(dir "${header}" DIRECTORY)
  foreach(line IN LISTS lines)
    if(line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
      get_filename_component(target "${CMAKE_MATCH_1}" ABSOLUTE BASE_DIR "${dir}")
    elseif(line MATCHES "#[ \t]*include[ \t]*<(ratelimit/[^>]+)>")
      set(target "${INCLUDE_DIR}/${CMAKE_MATCH_1}")
    else()
      continue()  # a system or third-party header
    endif()
    math(EXPR checked "${checked} + 1")
    layer_of(to "${target}")
    file(RELATIVE_PATH from_rel "${INCLUDE_DIR}" "${header}")
    file(RELATIVE_PATH to_rel "${INCLUDE_DIR}" "${target}")
    if(NOT EXISTS "${target}")
      list(APPEND violations "${from_rel} includes ${to_rel}, which does not exist")
    elseif(from STREQUAL to)
      continue()
    elseif(NOT DEFINED rank_${to})
      list(APPEND violations "${from_rel} includes ${to_rel}, outside every layer")
    elseif(to STREQUAL "testing" AND NOT from STREQUAL "top")
      list(APPEND violations "${from_rel} (${from}) includes the test clock ${to_rel}: only the "
                             "umbrella and forwarding headers may")
    elseif(NOT rank_${to} LESS rank_${from})
      list(APPEND violations "${from_rel} (${from}, rank ${rank_${from}}) includes ${to_rel} "
                             "(${to}, rank ${rank_${to}}): not a lower layer")
    endif()
  endforeach()
endforeach()

list(LENGTH headers count)
if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "check_layers.cmake: ${count} headers, includes against the layer order "
                      "(the top of cmake/check_layers.cmake, docs/layout.md):\n  ${text}")
endif()
message(STATUS "check_layers.cmake: ${count} headers, ${checked} project includes, all downward")
