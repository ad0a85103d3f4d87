#!/usr/bin/env bash
# The part scripts/redis.sh and scripts/memcached.sh share: start a throwaway daemon on a free
# loopback port with a temp dir of its own, wait until it answers, and stop it by the pid it
# wrote (never by a name match). Sourced, not run. The sourcing script defines:
#
#   daemon_name              what the messages call it, e.g. redis-server
#   daemon_dir PORT          its temp dir, e.g. $TMPDIR/ratelimit-redis-PORT
#   daemon_pidfile           the pid file's name inside that dir
#   daemon_launch PORT DIR   starts it daemonized, writing DIR/$daemon_pidfile; nonzero on failure
#   daemon_answers PORT      zero once it answers its protocol's ping
#   daemon_polite_stop PORT  asks it to stop (may do nothing; SIGTERM follows anyway)
#   daemon_log DIR           prints the last lines of its log, or nothing

daemon_port_in_use() {
  # A successful connect means someone listens there.
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

daemon_pid() {  # daemon_pid DIR: the pid it wrote, or nothing
  [[ -s "$1/$daemon_pidfile" ]] && cat "$1/$daemon_pidfile"
  return 0
}

# Prints the port on stdout once the daemon answers; 20 attempts at random ports.
daemon_start() {
  command -v "$daemon_name" >/dev/null || { echo "$daemon_name not installed" >&2; return 1; }
  local attempt port dir pid deadline
  for attempt in $(seq 1 20); do
    # Below Linux's ephemeral range (32768+), so outgoing connections don't take it meanwhile.
    port=$((20000 + RANDOM % 12000))
    daemon_port_in_use "$port" && continue
    dir="$(daemon_dir "$port")"
    rm -rf "$dir" && mkdir -p "$dir"
    if ! daemon_launch "$port" "$dir"; then
      rm -rf "$dir"
      continue
    fi
    # Up to 60 s: a daemon's first answer can take seconds on a machine busy with builds.
    deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)); do
      if daemon_answers "$port" 2>/dev/null; then
        echo "$daemon_name on 127.0.0.1:$port (dir $dir)" >&2
        echo "$port"
        return 0
      fi
      # Lost the port to someone else between the check and the bind: the daemon exits.
      pid="$(daemon_pid "$dir")"
      if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then break; fi
      sleep 0.1
    done
    echo "$daemon_name: no answer on port $port; log:" >&2
    daemon_log "$dir" >&2 || true
    daemon_stop "$port" || true
  done
  echo "could not start $daemon_name" >&2
  return 1
}

daemon_stop() {
  local port="${1:?usage: stop PORT}" dir pid i
  dir="$(daemon_dir "$port")"
  pid="$(daemon_pid "$dir")"
  daemon_polite_stop "$port" >/dev/null 2>&1 || true
  if [[ -n "$pid" ]]; then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    # Still alive after 10 s: kill it.
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -rf "$dir"
}

daemon_main() {
  case "${1:-}" in
    start) daemon_start ;;
    stop) daemon_stop "${2:-}" ;;
    *) echo "usage: $0 start | stop PORT" >&2; exit 2 ;;
  esac
}
