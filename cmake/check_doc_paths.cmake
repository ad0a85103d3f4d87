# check_doc_paths.cmake: every file or folder a map of the tree (docs/layout.md) names exists.
#
# A name is a path in backticks (`redis/binding.hpp`, `src/check/`) or a bare path with a
# file extension in the prose (tests/far/CMakeLists.txt). The map names many of them relative
# to the folder it is describing (`core/` in include/ratelimit, `src/main.cpp` in server), so
# a name passes when it exists under the root or under one of the BASES below. Skipped: names
# with a placeholder or a wildcard (`<name>`, `lua/*.lua`), commands (with a space), URL paths
# (starting with '/') and Go files (the Go service's, not ours). `a.hpp/.cpp` names both files.
#
# Usage: cmake -DROOT=<repository root> -DDOC=<markdown file> -P cmake/check_doc_paths.cmake
# Exits non-zero and lists every name that is missing.

cmake_minimum_required(VERSION 3.25)
if(NOT DEFINED ROOT OR NOT DEFINED DOC)
  message(FATAL_ERROR "check_doc_paths.cmake: pass -DROOT=... -DDOC=...")
endif()
get_filename_component(ROOT "${ROOT}" ABSOLUTE)
set(bases . include include/ratelimit include/ratelimit/algorithms include/ratelimit/redis
          include/ratelimit/redis/regional include/ratelimit/redis/lease include/ratelimit/lua
          lua server server/proto server/image tests)

file(READ "${DOC}" text)
string(REPLACE ";" "," text "${text}")  # a CMake list separator
string(REGEX MATCHALL "`[^`\n]+`" quoted "${text}")
string(REGEX MATCHALL "[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+\\.(hpp|cpp|lua|md|txt|cmake|sh|py|proto)"
       bare "${text}")
set(names "")
foreach(q IN LISTS quoted)
  string(REGEX REPLACE "^`(.*)`$" "\\1" q "${q}")
  # Only what looks like a path: a slash, or a file name with a known extension.
  if(q MATCHES "/" OR q MATCHES "^[A-Za-z0-9_.-]+\\.(hpp|cpp|lua|md|txt|cmake|sh|py|proto)$")
    list(APPEND names "${q}")
  endif()
endforeach()
list(APPEND names ${bare})
list(REMOVE_DUPLICATES names)

set(missing "")
set(checked 0)
foreach(name IN LISTS names)
  if(name MATCHES "[<>*| ]" OR name MATCHES "^/" OR name MATCHES "\\.go$" OR name MATCHES "^https?:")
    continue()
  endif()
  set(files "${name}")
  if(name MATCHES "^(.*)\\.([a-z]+)/\\.([a-z]+)$")  # a.hpp/.cpp
    set(files "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}" "${CMAKE_MATCH_1}.${CMAKE_MATCH_3}")
  endif()
  foreach(f IN LISTS files)
    string(REGEX REPLACE "^\\.\\./" "" f "${f}")  # a link from docs/ to the root
    math(EXPR checked "${checked} + 1")
    set(found OFF)
    foreach(base IN LISTS bases)
      if(EXISTS "${ROOT}/${base}/${f}")
        set(found ON)
        break()
      endif()
    endforeach()
    if(NOT found)
      list(APPEND missing "${f}")
    endif()
  endforeach()
endforeach()

if(missing)
  list(REMOVE_DUPLICATES missing)
  list(JOIN missing "\n  " text)
  message(FATAL_ERROR "check_doc_paths.cmake: ${DOC} names paths that do not exist (under the "
                      "root or the bases at the top of cmake/check_doc_paths.cmake):\n  ${text}")
endif()
message(STATUS "check_doc_paths.cmake: ${DOC}: ${checked} paths, all present")
