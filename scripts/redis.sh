#!/usr/bin/env bash
# A throwaway Redis for tests and benchmarks: loopback only, no persistence, its own temp dir.
#
#   port=$(scripts/redis.sh start)    # prints only the port on stdout once PING answers
#   scripts/redis.sh stop "$port"     # shuts it down and removes its temp dir
#
# Typical use, so that Redis stops on failure too:
#   port=$(scripts/redis.sh start); trap 'scripts/redis.sh stop "$port"' EXIT
# The server runs with DEBUG enabled for local clients (fault tests use DEBUG SLEEP); its log
# is $TMPDIR/ratelimit-redis-PORT/redis.log while it runs.
set -euo pipefail

base="${TMPDIR:-/tmp}"
dir_of() { echo "$base/ratelimit-redis-$1"; }

port_in_use() {
  # A successful connect means someone listens there.
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
  command -v redis-server >/dev/null || { echo "redis.sh: redis-server not installed" >&2; return 1; }
  local attempt port dir i
  for attempt in $(seq 1 20); do
    # Below Linux's ephemeral range (32768+), so outgoing connections don't take it meanwhile.
    port=$((20000 + RANDOM % 12000))
    port_in_use "$port" && continue
    dir="$(dir_of "$port")"
    rm -rf "$dir" && mkdir -p "$dir"
    if ! redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$dir" --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
        --enable-debug-command local >/dev/null 2>&1; then
      rm -rf "$dir"
      continue
    fi
    for i in $(seq 1 100); do  # up to 10 s
      if [[ "$(redis-cli -p "$port" ping 2>/dev/null)" == "PONG" ]]; then
        echo "redis.sh: redis-server on 127.0.0.1:$port (dir $dir)" >&2
        echo "$port"
        return 0
      fi
      # Lost the port to someone else between the check and the bind: the server exits.
      if [[ -s "$dir/redis.pid" ]] && ! kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null; then break; fi
      sleep 0.1
    done
    echo "redis.sh: no answer on port $port; log:" >&2
    tail -5 "$dir/redis.log" >&2 2>/dev/null || true
    stop "$port" || true
  done
  echo "redis.sh: could not start redis-server" >&2
  return 1
}

stop() {
  local port="${1:?usage: redis.sh stop PORT}" dir pid="" i
  dir="$(dir_of "$port")"
  [[ -s "$dir/redis.pid" ]] && pid="$(cat "$dir/redis.pid")"
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  if [[ -n "$pid" ]]; then
    for i in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    # Still alive after 5 s: kill the pid this script's server wrote (never a name match).
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  *) echo "usage: $0 start | stop PORT" >&2; exit 2 ;;
esac
