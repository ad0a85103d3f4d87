# check_no_code.cmake: including a public header alone emits no function.
#
# Every function of the library is inline or a template, so a translation unit that only
# includes a header has nothing to compile but declarations. When one emits code, a class's key
# function has gone missing (a virtual member declared without `inline` and defined inline
# elsewhere makes g++ emit its vtable and everything reachable from it in every including
# translation unit), or something at namespace scope runs code: either way every user pays
# for it in compile time. Runs `nm --defined-only` over the objects of ratelimit_header_check
# and fails, listing the headers and symbols, on any function (T, W, t).
#
# Usage: cmake -DOBJECTS=<a|b|c> -DNM=<nm> -P cmake/check_no_code.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT DEFINED OBJECTS OR NOT DEFINED NM)
  message(FATAL_ERROR "check_no_code.cmake: pass -DOBJECTS=a|b|... and -DNM=...")
endif()
string(REPLACE "|" ";" _objects "${OBJECTS}")
set(_bad "")
set(_checked 0)
foreach(_object IN LISTS _objects)
  execute_process(COMMAND "${NM}" --defined-only -C "${_object}" OUTPUT_VARIABLE _symbols
                  RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "check_no_code.cmake: ${NM} failed on ${_object}")
  endif()
  math(EXPR _checked "${_checked} + 1")
  string(REGEX MATCHALL "[^\n]* [TWt] [^\n]*" _functions "${_symbols}")
  if(_functions)
    list(LENGTH _functions _n)
    list(GET _functions 0 _first)
    get_filename_component(_name "${_object}" NAME)
    string(APPEND _bad "\n  ${_name}: ${_n} functions, e.g. ${_first}")
  endif()
endforeach()
if(_bad)
  message(FATAL_ERROR "headers that emit code when included alone:${_bad}")
endif()
message(STATUS "check_no_code.cmake: ${_checked} headers, none emits a function")
