#!/usr/bin/env bash
# The README's test command: installs what is missing, then builds and runs every test.
#
#   1. g++, warnings as errors: everything (tests at -O0 but those marked OPTIMIZED at -O1,
#      benchmarks at -O0 compiled only, examples and the server at -O2, each public header
#      alone);
#      ctest runs every test, the package checks included.
#   2. clang++ with AddressSanitizer + UndefinedBehaviorSanitizer: every test except the
#      `concurrent`, `package`, `image` and `gateways` labels (the image is the release
#      build's binary; the gateways test drives NGINX, Caddy and HAProxy, and the server's side
#      of it runs here in check_test).
#   3. ThreadSanitizer (clang++): the `concurrent` tests.
# A throwaway Redis runs for the whole script (RATELIMIT_TEST_REDIS=127.0.0.1:PORT) and is
# stopped on exit, failure included; so is a throwaway Redis Cluster (RATELIMIT_TEST_CLUSTER,
# scripts/redis_cluster.sh) for the `cluster` tests of build 1.
# Without Redis the `redis` (and `cluster`) tests are skipped with a warning, except when
# CI=true, where that is a failure. A second Redis (RATELIMIT_TEST_REDIS_PERSECOND, the server's
# per-second Redis) and two memcached (RATELIMIT_TEST_MEMCACHED=127.0.0.1:P1,127.0.0.1:P2,
# scripts/memcached.sh) run the same way; CI=true fails without them. The TLS tests' certificates (scripts/tls_certs.sh) are made
# once into a temp dir, named by RATELIMIT_TEST_TLS_CERTS and removed on exit; without them the
# TLS tests fail. The xDS tests' npm packages are installed into build/xds-npm
# (RATELIMIT_TEST_XDS_NODE_MODULES). Benchmarks are never run here.
# Build trees: build/gcc, build/asan, build/tsan. Exit status: 0 iff every step passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
jobs=2
t0=$SECONDS

summary=()
failed=0
total_passed=0
total_failed=0

note() { printf '\n=== %s\n' "$*"; }
record() {  # record STATUS NAME SECONDS
  summary+=("$(printf '%-6s %-44s %4ds' "$1" "$2" "$3")")
  [[ "$1" == FAIL ]] && failed=1
  return 0
}

# --- dependencies and Redis -------------------------------------------------------------------

note "dependencies"
if ! bash scripts/deps.sh test; then
  echo "test.sh: could not install the dependencies" >&2
  exit 1
fi

redis_port=""
stop_redis() {
  if [[ -n "$redis_port" ]]; then
    bash "$root/scripts/redis.sh" stop "$redis_port" || true
    redis_port=""
  fi
}
# The Redis Cluster for the `cluster` tests (scripts/redis_cluster.sh; its seed host:port).
cluster_seed=""
stop_cluster() {
  if [[ -n "$cluster_seed" ]]; then
    bash "$root/scripts/redis_cluster.sh" stop "$cluster_seed" || true
    cluster_seed=""
  fi
}
# The TLS tests' certificates (scripts/tls_certs.sh), one set for the whole run.
tls_dir=""
remove_tls_certs() {
  if [[ -n "$tls_dir" ]]; then
    rm -rf "$tls_dir"
    tls_dir=""
  fi
}
# The per-second Redis and the two memcached of the server's tests.
persecond_port=""
memcached_ports=()
stop_others() {
  if [[ -n "$persecond_port" ]]; then
    bash "$root/scripts/redis.sh" stop "$persecond_port" || true
    persecond_port=""
  fi
  local p
  for p in "${memcached_ports[@]}"; do bash "$root/scripts/memcached.sh" stop "$p" || true; done
  memcached_ports=()
}
trap 'stop_redis; stop_cluster; stop_others; remove_tls_certs' EXIT
trap 'stop_redis; stop_cluster; stop_others; remove_tls_certs; exit 130' INT TERM

note "redis"
exclude_redis=""
if redis_port=$(bash scripts/redis.sh start); then
  export RATELIMIT_TEST_REDIS="127.0.0.1:$redis_port"
  echo "RATELIMIT_TEST_REDIS=$RATELIMIT_TEST_REDIS"
else
  redis_port=""
  if [[ "${CI:-}" == "true" ]]; then
    echo "test.sh: CI=true and Redis could not be started: failing" >&2
    exit 1
  fi
  echo "test.sh: WARNING: no Redis; the tests labelled 'redis' are NOT run" >&2
  unset RATELIMIT_TEST_REDIS
  exclude_redis="|redis"
fi

note "redis cluster"
if cluster_seed=$(bash scripts/redis_cluster.sh start); then
  export RATELIMIT_TEST_CLUSTER="$cluster_seed"
  echo "RATELIMIT_TEST_CLUSTER=$RATELIMIT_TEST_CLUSTER"
else
  cluster_seed=""
  unset RATELIMIT_TEST_CLUSTER
  if [[ "${CI:-}" == "true" ]]; then
    echo "test.sh: CI=true and no Redis Cluster: the tests labelled 'cluster' will fail" >&2
  else
    echo "test.sh: WARNING: no Redis Cluster; the tests labelled 'cluster' are NOT run" >&2
  fi
fi

note "per-second redis and two memcached"
if persecond_port=$(bash scripts/redis.sh start); then
  export RATELIMIT_TEST_REDIS_PERSECOND="127.0.0.1:$persecond_port"
  echo "RATELIMIT_TEST_REDIS_PERSECOND=$RATELIMIT_TEST_REDIS_PERSECOND"
else
  persecond_port=""
  unset RATELIMIT_TEST_REDIS_PERSECOND
  if [[ "${CI:-}" == "true" ]]; then
    echo "test.sh: CI=true and the per-second Redis could not be started: failing" >&2
    exit 1
  fi
  echo "test.sh: WARNING: no per-second Redis; its server test case fails" >&2
fi
for _ in 1 2; do
  if port=$(bash scripts/memcached.sh start); then
    memcached_ports+=("$port")
  elif [[ "${CI:-}" == "true" ]]; then
    echo "test.sh: CI=true and memcached could not be started: failing" >&2
    exit 1
  fi
done
if [[ ${#memcached_ports[@]} -eq 2 ]]; then
  export RATELIMIT_TEST_MEMCACHED="127.0.0.1:${memcached_ports[0]},127.0.0.1:${memcached_ports[1]}"
  echo "RATELIMIT_TEST_MEMCACHED=$RATELIMIT_TEST_MEMCACHED"
else
  unset RATELIMIT_TEST_MEMCACHED
  echo "test.sh: WARNING: no two memcached; the server's memcache cases fail" >&2
fi

note "tls certificates"
if tls_dir=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-tls.XXXXXX") && bash scripts/tls_certs.sh "$tls_dir"; then
  export RATELIMIT_TEST_TLS_CERTS="$tls_dir"
  echo "RATELIMIT_TEST_TLS_CERTS=$RATELIMIT_TEST_TLS_CERTS"
else
  remove_tls_certs
  unset RATELIMIT_TEST_TLS_CERTS
  echo "test.sh: WARNING: could not make the TLS certificates; the TLS tests will fail" >&2
fi

note "npm packages of the xDS tests"
# The test xDS management server (server/tests/xds) runs on Node.js with the npm packages of its
# package.json, installed into build/xds-npm (never committed) and named by
# RATELIMIT_TEST_XDS_NODE_MODULES; without them the xDS tests fail. npm comes with NodeSource's
# nodejs; Debian's nodejs needs the npm package.
xds_npm="$root/build/xds-npm"
if { command -v npm >/dev/null || bash scripts/deps.sh npm; } && mkdir -p "$xds_npm" &&
    cp server/tests/xds/package.json "$xds_npm/package.json" &&
    (cd "$xds_npm" && npm install --no-audit --no-fund --no-package-lock --silent); then
  export RATELIMIT_TEST_XDS_NODE_MODULES="$xds_npm/node_modules"
  echo "RATELIMIT_TEST_XDS_NODE_MODULES=$RATELIMIT_TEST_XDS_NODE_MODULES"
else
  unset RATELIMIT_TEST_XDS_NODE_MODULES
  echo "test.sh: WARNING: could not install the xDS tests' npm packages; the xDS tests will fail" >&2
fi

note "statsd daemon (npm statsd, for the server's stats tests)"
# The reference statsd daemon, installed with npm into the build folder (never committed); the
# stats tests start it on free loopback ports (RATELIMIT_TEST_STATSD: its stats.js). Without it
# they fail under CI=true.
mkdir -p "$root/build"
statsd_dir="$root/build/npm-statsd"
statsd_js="$statsd_dir/node_modules/statsd/stats.js"
s=$SECONDS
if [[ -f "$statsd_js" ]] ||
    npm install --prefix "$statsd_dir" --no-audit --no-fund --no-save --ignore-scripts \
      statsd@0.9.0 >"$root/build/npm-statsd.log" 2>&1; then
  export RATELIMIT_TEST_STATSD="$statsd_js"
  echo "RATELIMIT_TEST_STATSD=$RATELIMIT_TEST_STATSD ($((SECONDS - s)) s)"
else
  unset RATELIMIT_TEST_STATSD
  tail -n 20 "$root/build/npm-statsd.log" >&2
  echo "test.sh: WARNING: npm could not install statsd; the statsd tests will fail under CI" >&2
fi

# --- helpers --------------------------------------------------------------------------------------

# configure NAME CMAKE_ARGS...: (re)configures build/NAME, output in build/NAME.configure.log.
# Ninja (Debian ninja-build, in the test group): the sanitizer builds name their test targets,
# and Make builds several named targets one after the other, each a single unity translation
# unit, so one core idled (the ASan build took 710 s); Ninja builds them side by side. A tree
# configured earlier with another generator is removed first (CMake refuses to switch).
configure() {
  local name="$1"
  shift
  mkdir -p build
  local generator=()
  if command -v ninja >/dev/null; then
    generator=(-G Ninja)
    if [[ -f "build/$name/CMakeCache.txt" ]] &&
        ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "build/$name/CMakeCache.txt"; then
      rm -rf "build/$name"
    fi
  fi
  cmake -S . -B "build/$name" "${generator[@]}" "$@" >"build/$name.configure.log" 2>&1 || {
    tail -n 60 "build/$name.configure.log"
    return 1
  }
}

# build NAME [TARGET...]: builds (all targets when none given); on failure shows the errors.
build() {
  local name="$1"
  shift
  local targets=()
  [[ $# -gt 0 ]] && targets=(--target "$@")
  cmake --build "build/$name" -j"$jobs" "${targets[@]}" >"build/$name.build.log" 2>&1 || {
    grep -E -B2 -A12 "error|warning" "build/$name.build.log" | head -n 150
    tail -n 20 "build/$name.build.log"
    return 1
  }
}

# existing_targets NAME TARGET...: those of the given targets that build/NAME has.
existing_targets() {
  local name="$1"
  shift
  local available
  # Make lists "... TARGET", Ninja "TARGET: phony".
  available=$(cmake --build "build/$name" --target help |
    sed -n -e 's/^\.\.\. \([^ ]*\).*/\1/p' -e 's/^\([^ :]*\): phony$/\1/p')
  printf '%s\n' "$@" | grep -Fxf <(printf '%s\n' "$available") || true
}

# test_targets NAME CTEST_SELECTION...: the build targets of the selected tests (a test made by
# ratelimit_add_test is named after its executable; tests that are not targets are skipped).
test_targets() {
  local name="$1"
  shift
  local tests
  mapfile -t tests < <( (cd "build/$name" && ctest -N "$@") | sed -n 's/^ *Test *#[0-9]*: *//p')
  [[ ${#tests[@]} -gt 0 ]] && existing_targets "$name" "${tests[@]}"
  return 0
}

# run_ctest NAME CTEST_ARGS...: runs ctest, adds its counts to the totals.
run_ctest() {
  local name="$1"
  shift
  local log="build/$name.ctest.log" rc
  (cd "build/$name" && ctest --output-on-failure -j"$jobs" "$@") 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  local line passed_pct failed_n total
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -n 1)
  if [[ -n "$line" ]]; then
    failed_n=$(sed -E 's/.* ([0-9]+) tests? failed out of.*/\1/' <<<"$line")
    total=$(sed -E 's/.*failed out of ([0-9]+).*/\1/' <<<"$line")
    total_failed=$((total_failed + failed_n))
    total_passed=$((total_passed + total - failed_n))
  elif [[ $rc -ne 0 ]]; then
    total_failed=$((total_failed + 1))
  fi
  return "$rc"
}

# --- formatting ---------------------------------------------------------------------------------

note "format: clang-format --dry-run against .clang-format"
s=$SECONDS
if bash scripts/format.sh --check; then
  record PASS "clang-format check" $((SECONDS - s))
else
  record FAIL "clang-format check (run scripts/format.sh)" $((SECONDS - s))
fi

# --- build 1: g++, everything --------------------------------------------------------------------

# The server and examples at -O2, as the release preset builds them: some of g++'s warnings
# come only from -O2's analyses, and -Werror must meet them here first. The benchmarks at -O0:
# here they are only compiled (bench/run builds them at -O2), a third faster.
note "build 1/3: g++ -Werror (tests -O0/-O1, benchmarks -O0, the rest -O2), everything; ctest (all labels)"
s=$SECONDS
if configure gcc -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE=-O2 -DRATELIMIT_TEST_COMPILE_OPTIONS=-O0 \
    -DRATELIMIT_OPTIMIZED_TEST_COMPILE_OPTIONS=-O1 -DRATELIMIT_BENCH_OPTIMIZE=-O0 \
    -DRATELIMIT_BUILD_TESTS=ON -DRATELIMIT_BUILD_BENCH=ON \
    -DRATELIMIT_BUILD_EXAMPLES=ON && build gcc; then
  record PASS "g++ build (tests, bench, examples)" $((SECONDS - s))
  # The cluster tests take turns on the throwaway cluster (RESOURCE_LOCK cluster: the failover
  # test changes its topology) beside the other tests, as the Redis tests do on theirs.
  s=$SECONDS
  gcc_exclude="${exclude_redis#|}"
  if [[ -z "$cluster_seed" && "${CI:-}" != "true" ]]; then
    record SKIP "g++ ctest -L cluster (no Redis Cluster)" 0
    gcc_exclude="cluster${exclude_redis}"
  fi
  gcc_select=()
  [[ -n "$gcc_exclude" ]] && gcc_select=(-LE "$gcc_exclude")
  if run_ctest gcc "${gcc_select[@]}"; then
    record PASS "g++ ctest (all labels)" $((SECONDS - s))
  else
    record FAIL "g++ ctest (all labels)" $((SECONDS - s))
  fi
else
  record FAIL "g++ build (tests, bench, examples)" $((SECONDS - s))
fi

# --- build 2: clang++ ASan + UBSan ------------------------------------------------------------------

# Also compiles compare_algorithms with clang++, so both compilers check the library
# warning-free (each header alone is compiled once, by g++ in build 1: clang++ with ASan took
# some 75 s more for it). -O0 but the OPTIMIZED tests at -O1: clang++ with ASan compiles the
# suite three times faster at -O0. -gline-tables-only: file:line in sanitizer reports, for less
# compile time than -g.
note "build 2/3: clang++ ASan+UBSan; ctest -LE 'concurrent|package|image|gateways|cluster${exclude_redis}'"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
s=$SECONDS
asan_select=(-LE "concurrent|package|image|gateways|cluster${exclude_redis}")
if configure asan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
    "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -gline-tables-only -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
    -DRATELIMIT_OPTIMIZED_TEST_COMPILE_OPTIONS=-O1 \
    -DRATELIMIT_BUILD_TESTS=ON -DRATELIMIT_BUILD_BENCH=OFF -DRATELIMIT_BUILD_EXAMPLES=ON \
    -DRATELIMIT_CHECK_HEADERS=OFF; then
  mapfile -t targets < <(test_targets asan "${asan_select[@]}")
  mapfile -t extra < <(existing_targets asan compare_algorithms)
  if [[ ${#targets[@]} -eq 0 && ${#extra[@]} -eq 0 ]]; then
    record SKIP "ASan+UBSan: nothing to build" $((SECONDS - s))
  elif build asan "${targets[@]}" "${extra[@]}"; then
    record PASS "clang++ ASan+UBSan build (${#targets[@]} tests, ${#extra[@]} more)" $((SECONDS - s))
    s=$SECONDS
    if run_ctest asan "${asan_select[@]}"; then
      record PASS "ASan+UBSan ctest" $((SECONDS - s))
    else
      record FAIL "ASan+UBSan ctest" $((SECONDS - s))
    fi
  else
    record FAIL "clang++ ASan+UBSan build" $((SECONDS - s))
  fi
else
  record FAIL "clang++ ASan+UBSan configure" $((SECONDS - s))
fi

# --- build 3: clang++ TSan --------------------------------------------------------------------------

# -O0: the concurrent tests compile twice as fast (62 s against 130) and still run in 20 s.
note "build 3/3: clang++ TSan; ctest -L concurrent"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
s=$SECONDS
tsan_select=(-L concurrent)
[[ -n "$exclude_redis" ]] && tsan_select+=(-LE redis)
if configure tsan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
    "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -gline-tables-only -fsanitize=thread" \
    -DRATELIMIT_BUILD_TESTS=ON -DRATELIMIT_BUILD_BENCH=OFF -DRATELIMIT_BUILD_EXAMPLES=OFF \
    -DRATELIMIT_CHECK_HEADERS=OFF; then
  mapfile -t targets < <(test_targets tsan "${tsan_select[@]}")
  if [[ ${#targets[@]} -eq 0 ]]; then
    record SKIP "TSan: no tests labelled concurrent yet" $((SECONDS - s))
  elif build tsan "${targets[@]}"; then
    record PASS "clang++ TSan build (${#targets[@]} tests)" $((SECONDS - s))
    s=$SECONDS
    if run_ctest tsan "${tsan_select[@]}"; then
      record PASS "TSan ctest (concurrent)" $((SECONDS - s))
    else
      record FAIL "TSan ctest (concurrent)" $((SECONDS - s))
    fi
  else
    record FAIL "clang++ TSan build" $((SECONDS - s))
  fi
else
  record FAIL "clang++ TSan configure" $((SECONDS - s))
fi

# --- summary ------------------------------------------------------------------------------------------

note "summary"
printf '%s\n' "${summary[@]}"
[[ -n "$exclude_redis" ]] && echo "WARNING: Redis was not available; the 'redis' tests did not run"
echo "total time: $((SECONDS - t0)) s"
if [[ $total_passed -eq 0 && $total_failed -eq 0 ]]; then
  echo "test.sh: no test ran" >&2
  failed=1
fi
echo "summary: $total_passed passed, $total_failed failed"
exit "$failed"
