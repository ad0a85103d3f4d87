# Run by CTest (cmake -P): configures, builds and runs tests/consumer against ratelimit.
# MODE=package: installs RATELIMIT_BINARY_DIR into WORK_DIR/prefix and uses find_package.
# MODE=subdirectory: the consumer add_subdirectory()s RATELIMIT_SOURCE_DIR.
foreach(_var RATELIMIT_SOURCE_DIR RATELIMIT_BINARY_DIR CONSUMER_SOURCE_DIR CXX_COMPILER GENERATOR
             MODE WORK_DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "check.cmake: ${_var} is not set")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    string(REPLACE ";" " " _cmd "${ARGV}")
    message(FATAL_ERROR "failed (${_rc}): ${_cmd}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(_configure "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build"
    -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCONSUMER_MODE=${MODE})
# The redis / rules consumers are worth building only once their headers exist.
set(_with_redis OFF)
if(HAVE_REDIS AND EXISTS "${RATELIMIT_SOURCE_DIR}/include/ratelimit/redis.hpp")
  set(_with_redis ON)
endif()
set(_with_rules OFF)
if(HAVE_RULES AND EXISTS "${RATELIMIT_SOURCE_DIR}/include/ratelimit/rules.hpp")
  set(_with_rules ON)
endif()
set(_with_calendar OFF)
if(HAVE_CALENDAR AND EXISTS "${RATELIMIT_SOURCE_DIR}/include/ratelimit/calendar.hpp")
  set(_with_calendar ON)
endif()
list(APPEND _configure -DCONSUMER_WITH_REDIS=${_with_redis} -DCONSUMER_WITH_RULES=${_with_rules}
     -DCONSUMER_WITH_CALENDAR=${_with_calendar})

if(MODE STREQUAL "package")
  set(_prefix "${WORK_DIR}/prefix")
  run("${CMAKE_COMMAND}" --install "${RATELIMIT_BINARY_DIR}" --prefix "${_prefix}")
  foreach(_f include/ratelimit/ratelimit.hpp share/cmake/ratelimit/ratelimitConfig.cmake
             share/cmake/ratelimit/ratelimitConfigVersion.cmake
             share/cmake/ratelimit/ratelimitTargets.cmake)
    if(NOT EXISTS "${_prefix}/${_f}")
      message(FATAL_ERROR "not installed: ${_f}")
    endif()
  endforeach()
  list(APPEND _configure "-DCMAKE_PREFIX_PATH=${_prefix}" "-DEXPECTED_PREFIX=${_prefix}")
elseif(MODE STREQUAL "subdirectory")
  list(APPEND _configure "-DRATELIMIT_SOURCE_DIR=${RATELIMIT_SOURCE_DIR}")
else()
  message(FATAL_ERROR "check.cmake: MODE must be package or subdirectory")
endif()

run(${_configure})
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer")
if(_with_calendar)
  run("${WORK_DIR}/build/consumer_calendar")
endif()
message(STATUS "consumer (${MODE}, redis ${_with_redis}, rules ${_with_rules}, calendar "
               "${_with_calendar}) configured, built and ran")
