# Run by CTest (cmake -P): configures, builds and runs tests/consumer against ratelimit.
# MODE=package: installs RATELIMIT_BINARY_DIR into WORK_DIR/prefix and uses find_package.
# MODE=subdirectory: the consumer add_subdirectory()s RATELIMIT_SOURCE_DIR.
# MODE=deb: makes the Debian packages with CPack from RATELIMIT_BINARY_DIR as the build left it
#   (its CPackConfig.cmake: the install of that tree, nothing configured or compiled again; the
#   packages are written under WORK_DIR), unpacks them with dpkg-deb into WORK_DIR/root (no root
#   rights, no change to the system), checks that its CMake package files are there (the ones
#   MODE=package builds against), and builds the consumer against that copy with pkg-config
#   alone (the compiler called directly with the flags of ratelimit.pc, ratelimit-redis.pc, ...).
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
file(MAKE_DIRECTORY "${WORK_DIR}")
# No build type, so no optimisation: these programs check that a user's build finds, compiles
# and links the library, not its speed, and CTest runs this beside other tests on few cores.
set(_configure "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build"
    -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" -DCMAKE_BUILD_TYPE=
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

# pkg_config_flags(<out> <module>): pkg-config's --cflags --libs for <module> in the unpacked
# package (PKG_CONFIG_PATH names only its share/pkgconfig; the system's .pc files answer the
# Requires: hiredis, openssl, yaml-cpp).
function(pkg_config_flags out module)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${_pc_dir}"
                          pkg-config --cflags --libs "${module}"
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _flags OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs ${module} failed (${_rc})")
  endif()
  separate_arguments(_flags UNIX_COMMAND "${_flags}")
  set(${out} ${_flags} PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "deb")
  # The packages of the tree the build made: cpack installs that tree (with Ninja it builds
  # nothing first; with Makefiles its `preinstall` step finds everything up to date). -B puts
  # the packages and cpack's staging under WORK_DIR, so the build tree is only read.
  set(_pkg_build "${WORK_DIR}/cpack")
  if(NOT EXISTS "${RATELIMIT_BINARY_DIR}/CPackConfig.cmake")
    message(FATAL_ERROR "no ${RATELIMIT_BINARY_DIR}/CPackConfig.cmake (RATELIMIT_INSTALL off?)")
  endif()
  execute_process(COMMAND cpack -G DEB --config "${RATELIMIT_BINARY_DIR}/CPackConfig.cmake"
                          -B "${_pkg_build}"
                  WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE _rc)
  file(GLOB _debs "${_pkg_build}/ratelimit-dev_*_all.deb")
  list(LENGTH _debs _n)
  if(NOT _rc EQUAL 0 OR NOT _n EQUAL 1)
    message(FATAL_ERROR "cpack made ${_n} packages named ratelimit-dev_*_all.deb (exit ${_rc})")
  endif()
  set(_root "${WORK_DIR}/root")
  run(dpkg-deb -x "${_debs}" "${_root}")
  set(_prefix "${_root}/usr")
  set(_pc_dir "${_prefix}/share/pkgconfig")
  foreach(_f include/ratelimit/ratelimit.hpp share/cmake/ratelimit/ratelimitConfig.cmake
             share/cmake/ratelimit/ratelimitConfigVersion.cmake
             share/cmake/ratelimit/ratelimitTargets.cmake share/pkgconfig/ratelimit.pc
             share/doc/ratelimit/LICENSE)
    if(NOT EXISTS "${_prefix}/${_f}")
      message(FATAL_ERROR "not in the package: /usr/${_f}")
    endif()
  endforeach()
  # pkg-config alone: the core, run; the optional parts, compiled and linked.
  pkg_config_flags(_core ratelimit)
  run("${CXX_COMPILER}" "${CONSUMER_SOURCE_DIR}/main.cpp" ${_core} -o "${WORK_DIR}/pc_consumer")
  run("${WORK_DIR}/pc_consumer")
  set(_pc_parts "")
  if(_with_redis)
    list(APPEND _pc_parts "ratelimit-redis=redis_main.cpp")
  endif()
  if(_with_rules)
    list(APPEND _pc_parts "ratelimit-rules=rules_main.cpp")
  endif()
  if(_with_calendar)
    list(APPEND _pc_parts "ratelimit-calendar=calendar_main.cpp")
  endif()
  foreach(_part IN LISTS _pc_parts)
    string(REPLACE "=" ";" _part "${_part}")
    list(GET _part 0 _module)
    list(GET _part 1 _main)
    pkg_config_flags(_flags "${_module}")
    run("${CXX_COMPILER}" "${CONSUMER_SOURCE_DIR}/${_main}" ${_flags} -o "${WORK_DIR}/pc_${_module}")
  endforeach()
  if(_with_calendar)
    run("${WORK_DIR}/pc_ratelimit-calendar")
  endif()
  # The server's package, when the server was built: the binary, and the libraries it needs in
  # its Depends (dpkg-shlibdeps), so that `apt install ./ratelimit-server_*.deb` pulls them in.
  if(EXISTS "${RATELIMIT_BINARY_DIR}/server/ratelimit_server")
    file(GLOB _server_debs "${_pkg_build}/ratelimit-server_*.deb")
    list(LENGTH _server_debs _n)
    if(NOT _n EQUAL 1)
      message(FATAL_ERROR "the server was built, but cpack made ${_n} ratelimit-server_*.deb")
    endif()
    set(_server_root "${WORK_DIR}/server_root")
    run(dpkg-deb -x "${_server_debs}" "${_server_root}")
    execute_process(COMMAND dpkg-deb -f "${_server_debs}" Depends OUTPUT_VARIABLE _depends)
    if(NOT _depends MATCHES "libgrpc")
      message(FATAL_ERROR "ratelimit-server's Depends names no gRPC library: '${_depends}'")
    endif()
    # The unpacked binary loads and reads its flags: a bad value is refused naming it.
    execute_process(COMMAND "${_server_root}/usr/bin/ratelimit_server" --grpc-port=no_such_port
                    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
    if(_rc EQUAL 0 OR NOT _out MATCHES "no_such_port")
      message(FATAL_ERROR "usr/bin/ratelimit_server --grpc-port=no_such_port: exit ${_rc}, '${_out}'")
    endif()
  endif()
  # find_package is not tried again on the unpacked copy: its CMake files are the ones
  # `cmake --install` writes (cpack installs the same tree), which package_find_package builds
  # against; here it would only compile the same four consumers once more.
  message(STATUS "consumer (deb, redis ${_with_redis}, rules ${_with_rules}, calendar "
                 "${_with_calendar}): the packages unpacked, built against with pkg-config, ran")
  return()
elseif(MODE STREQUAL "package")
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
  message(FATAL_ERROR "check.cmake: MODE must be package, subdirectory or deb")
endif()

run(${_configure})
# One compile at a time: CTest counts this test as one job (Ninja would start one per core
# plus two, beside CTest's other jobs).
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/build" --parallel 1)
run("${WORK_DIR}/build/consumer")
if(_with_calendar)
  run("${WORK_DIR}/build/consumer_calendar")
endif()
message(STATUS "consumer (${MODE}, redis ${_with_redis}, rules ${_with_rules}, calendar "
               "${_with_calendar}) configured, built and ran")
