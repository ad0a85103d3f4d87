#!/usr/bin/env bash
# A throwaway memcached for tests: loopback only, TCP only, 16 MB, its own temp dir.
#
#   port=$(scripts/memcached.sh start)    # prints only the port on stdout once it answers
#   scripts/memcached.sh stop "$port"     # stops it and removes its temp dir
set -euo pipefail

base="${TMPDIR:-/tmp}"
dir_of() { echo "$base/ratelimit-memcached-$1"; }

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

answers() {  # answers PORT: "version" gets "VERSION ..."
  local reply
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'version\r\n' >&3
  IFS= read -r -t 2 reply <&3 || reply=""
  exec 3>&-
  [[ "$reply" == VERSION* ]]
}

start() {
  command -v memcached >/dev/null || { echo "memcached.sh: memcached not installed" >&2; return 1; }
  local attempt port dir i
  for attempt in $(seq 1 20); do
    # Below Linux's ephemeral range (32768+), so outgoing connections don't take it meanwhile.
    port=$((20000 + RANDOM % 12000))
    port_in_use "$port" && continue
    dir="$(dir_of "$port")"
    rm -rf "$dir" && mkdir -p "$dir"
    if ! memcached -d -l 127.0.0.1 -p "$port" -U 0 -m 16 -P "$dir/memcached.pid" \
        -u "$(id -un)" >"$dir/memcached.log" 2>&1; then
      rm -rf "$dir"
      continue
    fi
    for i in $(seq 1 100); do  # up to 10 s
      if answers "$port" 2>/dev/null; then
        echo "memcached.sh: memcached on 127.0.0.1:$port (dir $dir)" >&2
        echo "$port"
        return 0
      fi
      if [[ -s "$dir/memcached.pid" ]] && ! kill -0 "$(cat "$dir/memcached.pid")" 2>/dev/null; then
        break
      fi
      sleep 0.1
    done
    echo "memcached.sh: no answer on port $port" >&2
    stop "$port" || true
  done
  echo "memcached.sh: could not start memcached" >&2
  return 1
}

stop() {
  local port="${1:?usage: memcached.sh stop PORT}" dir pid="" i
  dir="$(dir_of "$port")"
  [[ -s "$dir/memcached.pid" ]] && pid="$(cat "$dir/memcached.pid")"
  if [[ -n "$pid" ]]; then
    kill "$pid" 2>/dev/null || true
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
