#!/usr/bin/env bash
# The README's second demo: installs what is missing, builds the compare_algorithms example
# in Release (no tests, no benchmarks) and runs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh demo
build=build/demo
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DRATELIMIT_BUILD_TESTS=OFF \
  -DRATELIMIT_BUILD_BENCH=OFF -DRATELIMIT_BUILD_EXAMPLES=ON >/dev/null
cmake --build "$build" -j2 --target compare_algorithms
echo
"$build/examples/compare_algorithms/compare_algorithms"
