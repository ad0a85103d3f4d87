#!/usr/bin/env bash
# Load run of examples/http_gateway with wrk: requests/s and latency with and without the
# limiter, on a throwaway Redis on loopback (and the in-process storage for comparison).
#
#   examples/http_gateway/load_run.sh [SECONDS] [CONNECTIONS]     (defaults: 10 s, 8)
#
# Every request is GET /api/items with one API key, decided against load_rules.yaml: two limits,
# both so high that all requests are admitted (the full cost: one script, dry runs and commits).
# Prints a Markdown table: wrk's requests/s and p50/p99, and the limiter's own added latency
# p50/p99 as the gateway measured it (/metrics: descriptor building, the decision with its Redis
# round trip, and the headers).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
seconds=${1:-10}
connections=${2:-8}
threads=$((connections < 2 ? connections : 2))  # wrk needs connections >= threads

if [[ -f scripts/deps.sh ]]; then bash scripts/deps.sh gateway curl >&2; fi
build=build/gateway
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DRATELIMIT_BUILD_TESTS=OFF \
  -DRATELIMIT_BUILD_BENCH=OFF -DRATELIMIT_BUILD_EXAMPLES=ON >/dev/null
cmake --build "$build" -j2 --target http_gateway >&2
exe="$build/examples/http_gateway/http_gateway"

redis_port=$(bash scripts/redis.sh start)
gw_pid=""
log=$(mktemp)
cleanup() {
  if [[ -n "$gw_pid" ]] && kill -0 "$gw_pid" 2>/dev/null; then kill -TERM "$gw_pid"; wait "$gw_pid" || true; fi
  bash scripts/redis.sh stop "$redis_port" >/dev/null 2>&1 || true
  rm -f "$log"
}
trap cleanup EXIT

# run LABEL GATEWAY-ARGS...: one wrk run against a fresh gateway; prints one table row.
run() {
  local label=$1
  shift
  "$exe" --port 0 --rules "$here/load_rules.yaml" "$@" >"$log" 2>&1 &
  gw_pid=$!
  local port=""
  for _ in $(seq 100); do
    port=$(sed -n 's|^listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log")
    [[ -n "$port" ]] && break
    sleep 0.1
  done
  [[ -n "$port" ]] || { cat "$log" >&2; exit 1; }
  local url="http://127.0.0.1:$port/api/items"
  # Warm up (connections to Redis, the script cache), then measure.
  wrk -t"$threads" -c"$connections" -d2s -H 'X-API-Key: load-key' "$url" >/dev/null
  local out
  out=$(wrk -t"$threads" -c"$connections" -d"${seconds}s" --latency -H 'X-API-Key: load-key' "$url")
  local rps p50 p99 non2xx lim50 lim99
  rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
  p50=$(awk '$1 == "50%" { print $2 }' <<<"$out")
  p99=$(awk '$1 == "99%" { print $2 }' <<<"$out")
  non2xx=$(awk '/Non-2xx/ { print $5 }' <<<"$out")
  local metrics
  metrics=$(curl -s "http://127.0.0.1:$port/metrics")
  lim50=$(awk -F'} ' '/limiter_latency_seconds\{quantile="0.5"\}/ { printf "%.1f us", $2 * 1e6 }' <<<"$metrics")
  lim99=$(awk -F'} ' '/limiter_latency_seconds\{quantile="0.99"\}/ { printf "%.1f us", $2 * 1e6 }' <<<"$metrics")
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$rps" "$p50" "$p99" \
    "${lim50:--}" "${lim99:--}" "${non2xx:-0}"
  kill -TERM "$gw_pid"
  wait "$gw_pid" || true
  gw_pid=""
}

echo "wrk -t$threads -c$connections -d${seconds}s, GET /api/items, one API key, $(nproc) CPUs:"
echo
echo '| gateway | requests/s | p50 | p99 | limiter p50 | limiter p99 | non-2xx |'
echo '|---|---|---|---|---|---|---|'
run "Redis, limiter on" --redis "127.0.0.1:$redis_port" --key-prefix "load:"
run "Redis, limiter off" --redis "127.0.0.1:$redis_port" --no-limit
run "in-process, limiter on"
run "in-process, limiter off" --no-limit
