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
# One nm over every object (-A names each line's object): a process per object took most of
# this test's 14 s.
execute_process(COMMAND "${NM}" --defined-only -C -A ${_objects} OUTPUT_VARIABLE _symbols
                RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "check_no_code.cmake: ${NM} failed (${_rc})")
endif()
list(LENGTH _objects _checked)
# Lines "OBJECT:ADDRESS TYPE NAME": the functions, grouped by object.
string(REGEX MATCHALL "[^\n]* [TWt] [^\n]*" _functions "${_symbols}")
set(_bad "")
set(_seen "")
foreach(_line IN LISTS _functions)
  string(REGEX REPLACE "^([^:]*):.*" "\\1" _object "${_line}")
  if(NOT _object IN_LIST _seen)
    list(APPEND _seen "${_object}")
    get_filename_component(_name "${_object}" NAME)
    string(APPEND _bad "\n  ${_name}: e.g. ${_line}")
  endif()
endforeach()
if(_bad)
  message(FATAL_ERROR "headers that emit code when included alone:${_bad}")
endif()
message(STATUS "check_no_code.cmake: ${_checked} headers, none emits a function")
