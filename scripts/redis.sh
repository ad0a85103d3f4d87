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
source "$(dirname "${BASH_SOURCE[0]}")/throwaway_daemon.sh"

daemon_name=redis-server
daemon_pidfile=redis.pid
daemon_dir() { echo "${TMPDIR:-/tmp}/ratelimit-redis-$1"; }
daemon_launch() {
  redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$2" --daemonize yes --pidfile "$2/redis.pid" --logfile "$2/redis.log" \
    --enable-debug-command local >/dev/null 2>&1
}
daemon_answers() { [[ "$(redis-cli -p "$1" ping 2>/dev/null)" == "PONG" ]]; }
daemon_polite_stop() { redis-cli -p "$1" shutdown nosave; }
daemon_log() { tail -5 "$1/redis.log" 2>/dev/null; }

daemon_main "$@"
