# Sourced by the gateway demos (scripts/gateway_demo.sh, scripts/shed_demo.sh), from the project
# root: builds examples/http_gateway in Release and starts it.
#
#   gateway_start [GATEWAY-ARGS...]
#
# Starts the gateway on a free loopback port with the given arguments, waits (up to 10 s) until
# it listens, prints its first line, and sets `port`; an EXIT trap stops it. Exits 1 if it does
# not start.

gateway_start() {
  local build=build/gateway
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DRATELIMIT_BUILD_TESTS=OFF \
    -DRATELIMIT_BUILD_BENCH=OFF -DRATELIMIT_BUILD_EXAMPLES=ON >/dev/null
  cmake --build "$build" -j2 --target http_gateway

  gateway_log=$(mktemp)
  "$build/examples/http_gateway/http_gateway" --port 0 "$@" >"$gateway_log" 2>&1 &
  gateway_pid=$!
  trap gateway_stop EXIT

  port=""
  for _ in $(seq 100); do  # up to 10 s for the server to start listening
    port=$(sed -n 's|^listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$gateway_log")
    [[ -n "$port" ]] && break
    kill -0 "$gateway_pid" 2>/dev/null || { cat "$gateway_log" >&2; exit 1; }
    sleep 0.1
  done
  [[ -n "$port" ]] || { echo "gateway did not start" >&2; cat "$gateway_log" >&2; exit 1; }
  echo
  head -n 1 "$gateway_log"
}

gateway_stop() {
  if kill -0 "$gateway_pid" 2>/dev/null; then
    kill -TERM "$gateway_pid"
    wait "$gateway_pid" || true
  fi
  rm -f "$gateway_log"
}
